"""What a frozen-world worker sends the orchestrator is data, never code.

Env code (a python policy, a tool, a verifier) runs inside the worker process and can reach
the worker's end of the pipe to the orchestrator (it is an object in its own process). The
orchestrator holds what the world must not have (API keys, the network, the run directory), so
a message that unpickles into a call (``os.system`` through ``__reduce__``) or imports a module
must be refused: the worker is then treated as lost, the rollout is recorded as its death, and
nothing the message named runs. (A local worker runs env code in a child that has no pipe to
the orchestrator at all, `rlenv.worker.isolate`; a Ray actor's replies go through the same
checks, `tests/test_ray_replies.py`.)
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from rlenv.executors.wire import UnsafeMessage, loads
from tests.conftest import EnvBuilder, cli, read_jsonl

ATTACK = """
import gc, os, multiprocessing.connection

MARKER = {marker!r}

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + MARKER,))

class Importer:
    def __reduce__(self):  # a module the orchestrator never imported: importing runs it
        return (__import__, ("{module}",))

def _pipes():
    return [o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection)]

def policy(messages, tools, ctx):
    if "attack" in messages[-1]["content"]:
        payload = Evil() if "call" in messages[-1]["content"] else Importer()
        for pipe in _pipes():
            try:
                pipe.send(("ok", {{"planted": payload}}))
            except Exception:
                pass
    return messages[-1]["content"].split()[-1]
"""


@pytest.mark.parametrize("kind", ["call", "import"])
def test_a_pickled_call_from_env_code_never_runs_in_the_orchestrator(
    env_builder: EnvBuilder, tmp_path: Path, kind: str
) -> None:
    marker = tmp_path / "pwned"
    module = f"planted_{kind}_module"
    (env_builder.root).mkdir(parents=True, exist_ok=True)
    # a module that, if the orchestrator imported it, would leave the marker
    (env_builder.root / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    spec = env_builder.write(
        ATTACK.format(marker=str(marker), module=module),
        inputs=[
            {"id": "ok0", "prompt": "say ok0", "answer": "ok0"},
            {"id": "bad", "prompt": f"attack {kind}", "answer": kind},
            {"id": "ok1", "prompt": "say ok1", "answer": "ok1"},
        ],
        rollouts=1,
    )
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out), "--json", "--concurrency", "1")
    assert not marker.exists(), "a message from the worker ran code in the orchestrator"
    assert result.returncode in (0, 1), result.stderr[-2000:]
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    # env code runs in a child of the worker that holds no pipe to the orchestrator
    # (`rlenv.worker.isolate`): the message goes nowhere, the rollout is graded on its answer
    assert records["bad"]["status"] == "ok", records["bad"]
    assert "planted" not in json.dumps(records["bad"])
    assert records["ok0"]["passed"] and records["ok1"]["passed"]


def test_a_pickled_call_sent_while_the_world_starts_never_runs(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The same attack from module-level code, while the worker imports the env (before it
    says it is ready): refused at once, in one line, nothing run."""
    marker = tmp_path / "pwned"
    code = ATTACK.format(marker=str(marker), module="unused") + (
        "\nfor _pipe in _pipes():\n    _pipe.send(('ready', Evil()))\n"
    )
    spec = env_builder.write(code, rollouts=1)
    result = cli("run", str(spec), "--out", str(tmp_path / "run"), "--concurrency", "1")
    assert not marker.exists(), "a message from a starting worker ran code in the orchestrator"
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "sent something that is not a message of a worker" in result.stderr


def test_loads_takes_the_messages_workers_send() -> None:
    from rlenv.agent import RolloutTimeout, ToolOutcome
    from rlenv.errors import FixtureMiss, InfraError

    for message in [
        ("ready", 1234),
        ("ok", {"a": [1, 2.5, None, True, "x"], "b": {"c": (1, 2)}}),
        ("ok", ToolOutcome("content", "hit", True, traceback=["frame"])),
        ("ok", ({"record": 1}, 2, 3)),
        ("raise", FixtureMiss("no fixture for GET http://x")),
        ("raise", RolloutTimeout("rollout timed out")),
        ("raise", InfraError("openai: unreachable")),
        ("raise", RuntimeError("worker: boom")),
        ("done", None),
    ]:
        again = loads(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(again) is tuple and again[0] == message[0]
        if isinstance(message[1], BaseException):
            assert type(again[1]) is type(message[1]) and again[1].args == message[1].args
        else:
            assert again == message


@pytest.mark.parametrize(
    "payload",
    [
        ("os", "system"),
        ("builtins", "eval"),
        ("builtins", "getattr"),
        ("subprocess", "Popen"),
        ("rlenv.files", "atomic_write"),
        ("rlenv.results", "ResultsWriter"),
        ("rlenv.executors.local", "LocalExecutor"),
        ("never_imported_module", "anything"),
    ],
)
def test_loads_refuses_any_other_global(payload: tuple[str, str]) -> None:
    module, name = payload
    data = pickle.PROTO + bytes([4]) + _global(module, name) + pickle.EMPTY_TUPLE
    data += pickle.REDUCE + pickle.STOP
    with pytest.raises(UnsafeMessage):
        loads(data)


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"
