"""An outside rollout's grading does not hold its place among the rollouts in conversation when
its conversation needs no worker (`rlenv.outside_rollout.run_outside`): the next rollout's model
call goes out while it is graded, and no more than `--concurrency` wait for or are in grading.
With a tool (a conversation that needs a worker) a rollout holds its place until it is graded,
as before: a slow grading then cannot starve the next conversation's tool calls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rlenv.runner import RunSettings, run
from tests.conftest import EnvBuilder, read_jsonl

SLOW_GRADER = """
import time

def search(arguments, ctx):
    return "found " + arguments["query"]

def check(answer, data, ctx):
    time.sleep(1.0)
    return True
"""

INPUTS = [{"id": name, "prompt": f"say {name}"} for name in ("a", "b", "c")]


def _arrivals(
    chat: Any, env_builder: EnvBuilder, tmp_path: Path, **spec: Any
) -> tuple[list[float], list[float]]:
    """The run's model requests' arrival times at the server, and the times its records were
    handed on (graded), each read in this process on one clock (`time.monotonic`)."""
    server = chat()
    path = env_builder.write(
        SLOW_GRADER,
        inputs=INPUTS,
        rollouts=1,
        limits={"max_turns": 3, "timeout_s": 30},
        verifiers=[{"type": "python", "function": "MOD:check"}],
        **spec,
    )
    settings = RunSettings(
        model="openai:tiny", base_url=server.base_url, out=tmp_path / "run", concurrency=1
    )
    graded: list[float] = []
    result = run(path, settings, progress=lambda done, total: graded.append(time.monotonic()))
    assert result.summary["counts"] == {"ok": 3}, result.summary["counts"]
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert sorted(record["input_id"] for record in records) == ["a", "b", "c"]
    assert all(record["passed"] for record in records)
    return [entry["time"] for entry in server.log], graded[-3:]


def test_the_next_model_call_goes_out_while_a_rollout_is_graded(
    chat: Any, env_builder: EnvBuilder, tmp_path: Path
) -> None:
    times, graded = _arrivals(chat, env_builder, tmp_path)
    assert len(times) == 3
    # one in conversation (--concurrency 1): b's call went out while a was graded...
    assert times[1] < graded[0], (times, graded)
    # ...and c's waited for a's grading to end: one grading aside at most (--concurrency 1)
    assert times[2] > graded[0], (times, graded)


def test_with_a_tool_a_rollout_holds_its_place_until_it_is_graded(
    chat: Any, env_builder: EnvBuilder, tmp_path: Path
) -> None:
    tool = {
        "name": "search",
        "function": "MOD:search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
    times, graded = _arrivals(chat, env_builder, tmp_path, tools=[tool])
    assert len(times) == 6  # a tool call and a final answer per rollout
    for rollout, first_call in ((0, 2), (1, 4)):  # the next rollout's first call came after
        assert times[first_call] > graded[rollout], (times, graded)


def test_what_a_grading_raises_ends_the_run_as_itself(
    chat: Any, env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A grading's record handed on raises (here the caller's progress callback, as a
    trainer's callback might): the run ends with that exception, not after every rollout."""
    server = chat()
    path = env_builder.write(
        SLOW_GRADER.replace("time.sleep(1.0)", "time.sleep(0.0)"),
        inputs=[{"id": f"i{n}", "prompt": f"say {n}"} for n in range(40)],
        rollouts=1,
        verifiers=[{"type": "python", "function": "MOD:check"}],
    )

    class Refused(Exception):
        pass

    def progress(done: int, total: int) -> None:
        if done == 3:
            raise Refused(f"{done} of {total}")

    settings = RunSettings(
        model="openai:tiny", base_url=server.base_url, out=tmp_path / "run", concurrency=2
    )
    with pytest.raises(Refused, match="3 of 40"):
        run(path, settings, progress=progress)
    assert len(server.log) < 40  # it ended there, not after the last rollout
