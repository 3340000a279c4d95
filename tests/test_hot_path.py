"""The orchestrator's hot path for outside rollouts (issue 30 item 4): uvloop's event loop on a
local run gives the records asyncio's gives, and the per-run constants stay per rollout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlenv import outside_rollout, runner
from rlenv.results import read_results
from rlenv.runner import RunSettings, run
from tests.chat_server import ChatServer
from tests.conftest import SEARCH_TOOL, EnvBuilder

SEARCH_CODE = """
def search(args, ctx):
    return "result for " + args["query"]
"""
INPUTS = [
    {"id": f"q{index}", "prompt": f"say {index}", "answer": f"say {index}"} for index in range(6)
]

SEARCH_TOOLS = [SEARCH_TOOL]


def _spec(env_builder: EnvBuilder) -> Path:
    return env_builder.write(SEARCH_CODE, inputs=INPUTS, tools=SEARCH_TOOLS, rollouts=2)


def _run(spec: Path, out: Path, base_url: str, loops: list[str]) -> dict[str, Any]:
    """A local run at 4 in flight; `loops` gets the class name of the loop it ran on."""
    original = runner._execute

    async def noted(*args: Any) -> None:
        loops.append(type(asyncio.get_running_loop()).__module__)
        await original(*args)

    runner._execute = noted  # type: ignore[assignment]
    try:
        settings = RunSettings(model="openai:tiny", base_url=base_url, concurrency=4, out=out)
        return run(spec, settings).summary
    finally:
        runner._execute = original  # type: ignore[assignment]


def test_uvloop_and_asyncio_loops_give_the_same_records(
    chat: Callable[..., ChatServer],
    env_builder: EnvBuilder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uvloop = pytest.importorskip("uvloop")
    assert runner._loop_factory("local") is uvloop.new_event_loop
    assert runner._loop_factory("ray") is None, "Ray's client keeps asyncio's loop"
    server = chat()
    spec = _spec(env_builder)
    loops: list[str] = []
    fast = _run(spec, tmp_path / "uvloop", server.base_url, loops)
    monkeypatch.setattr(runner, "_loop_factory", lambda kind: None)
    plain = _run(spec, tmp_path / "asyncio", server.base_url, loops)
    assert loops == ["uvloop", "asyncio.unix_events"]
    assert fast["counts"] == {"ok": 12} and fast["pass_rate"]["value"] == 0.0
    assert fast["digest"] == plain["digest"]
    assert fast["outcome_digest"] == plain["outcome_digest"]
    first = read_results(tmp_path / "uvloop" / "results.jsonl")
    assert {record["answer"] for record in first} == {f"result for say {i}" for i in range(6)}


def test_each_rollout_gets_its_own_tools_and_decoding(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The tools' schemas and the decoding are made once per run: a provider that changes a
    request's (as a policy may) changes no other rollout's."""
    server = chat()
    spec = _spec(env_builder)
    seen: list[tuple[int, int]] = []
    original = outside_rollout.request_maker

    def spoiling(tools: list[dict[str, Any]], decoding: dict[str, Any], *rest: Any) -> Any:
        seen.append((id(tools), id(decoding)))
        make = original(tools, decoding, *rest)

        def request(current: list[dict[str, Any]], turn: int) -> Any:
            made = make(current, turn)
            made.tools.append({"type": "function", "function": {"name": "spoiled"}})
            made.decoding["temperature"] = 2.0
            return made

        return request

    outside_rollout.request_maker = spoiling  # type: ignore[assignment]
    try:
        summary = run(
            spec, RunSettings(model="openai:tiny", base_url=server.base_url, out=tmp_path / "r")
        ).summary
    finally:
        outside_rollout.request_maker = original  # type: ignore[assignment]
    assert len(set(seen)) == len(seen) == 12
    assert summary["counts"] == {"ok": 12}
    first_turns = [body for body in server.received if body["messages"][-1]["role"] == "user"]
    assert len(first_turns) == 12
    for body in first_turns:  # each rollout's first request: one spoiled tool, not many
        assert [tool["function"]["name"] for tool in body["tools"]] == ["search", "spoiled"]
        assert body["temperature"] == 2.0


PRINTING_CODE = """
def search(args, ctx):
    print("tool saw " + args["query"])
    return "result for " + args["query"]
"""


def test_what_an_outside_rollouts_tool_prints_reaches_its_record(
    chat: Callable[..., ChatServer], env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A tool call driven from outside prints (Python's buffered `print`) in its call's child;
    the output waits in the worker (a file in the work root) until the rollout's finish puts
    it in the record. The child ends with `os._exit`, which flushes nothing: before the fix,
    every such print was lost and the record had no `output`."""
    server = chat()
    spec = env_builder.write(PRINTING_CODE, inputs=INPUTS, tools=SEARCH_TOOLS, rollouts=1)
    out = tmp_path / "out"
    run(spec, RunSettings(model="openai:tiny", base_url=server.base_url, concurrency=4, out=out))
    records = read_results(tmp_path / "out" / "results.jsonl")
    assert len(records) == len(INPUTS)
    for record in records:
        assert record["answer"] == f"result for {record['messages'][0]['content']}"
        assert record["output"]["stdout"] == f"tool saw {record['messages'][0]['content']}\n"
