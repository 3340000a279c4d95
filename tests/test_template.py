"""Every rollout's env code starts from the world as it was loaded (issue 30's template
process): a rollout's child is forked from a process made once, after the world loaded and
before anything was graded, never from the worker that graded the rollouts before it. The
attack: a python verifier (env code in the worker) keeps what it graded in its module, and the
policy of a later rollout (in its child) reads it there; with children forked from the worker,
the fourth rollout saw the three answers graded before it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import EnvBuilder, cli, read_jsonl

CODE = """
GRADED = []

def policy(messages, tools, ctx):
    return "graded before me: " + ",".join(GRADED)

def verifier(answer, data, ctx):
    GRADED.append(data["id"])
    return True
"""

INPUTS = [{"id": f"i{n}", "prompt": f"say {n}"} for n in range(4)]


def _answers(code: str, env_builder: EnvBuilder, out: Path) -> list[str]:
    """The answers of a run of `code`'s policy over INPUTS, one rollout each, one after
    another in one worker, graded by `code`'s python verifier."""
    spec = env_builder.write(
        code,
        inputs=INPUTS,
        rollouts=1,
        verifiers=[{"type": "python", "function": "MOD:verifier"}],
    )
    one_by_one = ("--concurrency", "1", "--workers", "1")
    done = cli("run", str(spec), "--out", str(out), "--json", *one_by_one)
    assert done.returncode == 0, done.stderr[-2000:]
    records = sorted(read_jsonl(out / "results.jsonl"), key=lambda r: r["input_id"])
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    return [r["answer"] for r in records]


def test_a_verifier_leaves_nothing_for_the_next_rollouts_policy(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    assert _answers(CODE, env_builder, tmp_path / "run") == ["graded before me: "] * 4


SIGNALS = """
import os, signal

GRADED = []

def policy(messages, tools, ctx):
    said = []
    for name in ("SIGSTOP", "SIGKILL"):  # the process this one was forked from
        try:
            os.kill(os.getppid(), getattr(signal, name))
            said.append(name + " sent")
        except OSError as exc:
            said.append(f"{name} refused ({exc.errno})")
    return "; ".join(said) + " | graded before me: " + ",".join(GRADED)

def verifier(answer, data, ctx):
    GRADED.append(data["id"])
    return True
"""


def test_a_rollout_cannot_stop_or_kill_the_template(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Were the template killed, the worker would fork another from itself, which has graded
    rollouts by then (and stopped, it would hold up the next rollout): its real and saved user
    ids are not the children's, so no signal of theirs reaches it."""
    refused = "SIGSTOP refused (1); SIGKILL refused (1) | graded before me: "
    assert _answers(SIGNALS, env_builder, tmp_path / "run") == [refused] * 4
