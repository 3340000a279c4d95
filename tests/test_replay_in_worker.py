"""A rollout whose conversation runs no env code (a ``replay:`` policy, no tool, no simulated
user) is answered by the worker itself, without a child process of its own (issue 30: a fork
per rollout was most of a plain rollout's cost). Any env code in the conversation still gets a
child per rollout: the attack below is a simulated user (env code) beside a replayed policy,
keeping a count in its module across rollouts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EnvBuilder, cli, read_jsonl

USER = """
SEEN = []

def user(messages, input, ctx):
    SEEN.append(input["id"])
    if sum(1 for m in messages if m["role"] == "user") > 1:
        return None
    return "rollouts this process saw: " + ",".join(SEEN)
"""

INPUTS = [{"id": f"i{n}", "prompt": f"say {n}", "answer": str(n)} for n in range(4)]


def _replay_file(path: Path) -> Path:
    lines = [{"input_id": f"i{n}", "rollout": 0, "answer": str(n)} for n in range(4)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _run(spec: Path, replay: Path, out: Path) -> list[dict]:
    done = cli(
        "run",
        str(spec),
        "--model",
        f"replay:{replay}",
        "--out",
        str(out),
        "--json",
        "--concurrency",
        "1",
        "--workers",
        "1",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted(read_jsonl(out / "results.jsonl"), key=lambda r: r["input_id"])


def test_a_replayed_policy_is_graded_as_before(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write("", inputs=INPUTS, rollouts=1)
    records = _run(spec, _replay_file(tmp_path / "replay.jsonl"), tmp_path / "run")
    assert [r["answer"] for r in records] == ["0", "1", "2", "3"]
    assert all(r["status"] == "ok" and r["passed"] for r in records)
    assert [m["role"] for m in records[0]["messages"]] == ["user", "assistant"]


def test_a_simulated_user_beside_a_replayed_policy_starts_fresh_each_rollout(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        USER, inputs=INPUTS, rollouts=1, user={"function": f"{env_builder.module}:user"}
    )
    records = _run(spec, _replay_file(tmp_path / "replay.jsonl"), tmp_path / "run")
    said = {r["input_id"]: r["messages"][2]["content"] for r in records}
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    assert said == {f"i{n}": f"rollouts this process saw: i{n}" for n in range(4)}, said


VERIFIER = """
import os

def verify(answer, input, ctx):
    here = os.getcwd()
    seen = sorted(os.listdir(here))
    with open("mark", "w") as handle:  # the next rollout's workdir must not have it
        handle.write(input["id"])
    return here == str(ctx.workdir) and not seen, f"{os.path.basename(here)} {seen}"
"""


def test_a_replayed_rollout_graded_by_env_code_still_gets_a_fresh_workdir(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Rollouts of a world where nothing reads the workdir get none on disk (the text
    verifiers alone: rlenv's own code); a python verifier beside a replayed policy is env code
    that may, and writes there: each rollout's verifier must find its own workdir, entered and
    empty, whatever the one before it left."""
    spec = env_builder.write(
        VERIFIER,
        inputs=INPUTS,
        rollouts=1,
        verifiers=[
            {"type": "exact_match", "expected_field": "answer"},
            {"name": "workdir", "type": "python", "function": "MOD:verify"},
        ],
    )
    records = _run(spec, _replay_file(tmp_path / "replay.jsonl"), tmp_path / "run")
    details = [r["verifiers"][1]["detail"] for r in records]
    assert all(r["status"] == "ok" and r["passed"] for r in records), details
    assert details == [f"{n}-0 []" for n in range(4)], details


EMPTY_WORLD = {"added": {}, "removed": [], "modified": {}}


def test_a_replayed_rollout_with_text_verifiers_changes_nothing(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write("", inputs=INPUTS, rollouts=1)
    records = _run(spec, _replay_file(tmp_path / "replay.jsonl"), tmp_path / "run")
    assert [r["world"] for r in records] == [EMPTY_WORLD] * 4


def _volatile_free(records: list[dict]) -> list[dict]:
    """The records without what differs between two replay files: their paths (``model``,
    and so ``digest``), and without what is volatile."""
    left_out = ("timing", "output", "model", "digest")
    return [{k: v for k, v in r.items() if k not in left_out} for r in records]


def test_a_replayed_answer_makes_the_record_the_agent_loop_makes(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """An answer (or completion) replayed without usage is one turn of the agent loop with
    nothing to call or add up: the worker builds its trajectory without the loop
    (`WorldRuntime._answered`). An entry with usage goes through the loop; a usage of zero
    tokens adds nothing, so both runs' records must be the same but for the file's path."""
    spec = env_builder.write("", inputs=INPUTS, rollouts=1)
    entries = [{"answer": "0"}, {"answer": 1}, {"completion": "2"}, {"answer": None}]
    runs = []
    for name, extra in (("short", {}), ("loop", {"usage": {"prompt_tokens": 0}})):
        path = tmp_path / f"{name}.jsonl"
        lines = [
            {"input_id": f"i{n}", "rollout": 0, **entry, **extra} for n, entry in enumerate(entries)
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        runs.append(_volatile_free(_run(spec, path, tmp_path / name)))
    assert runs[0] == runs[1]
    assert [r["answer"] for r in runs[0]] == ["0", "1", "2", None]
    assert [r["status"] for r in runs[0]] == ["ok"] * 4
