"""The worker package's shape: one table of calls, known by name to every executor; its
modules in layers; the loop's policy and tool callers shared by both rollout paths."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from rlenv.agent import ToolOutcome
from rlenv.executors import replies
from rlenv.executors.base import CALLS
from rlenv.executors.ray import WorldActor
from rlenv.worker.policy_calls import numbered_tool_calls, request_maker
from rlenv.worker.protocol import HANDLERS
from tests.test_architecture import ROOT, _lint_imports


def test_every_call_a_worker_answers_is_known_to_the_executors() -> None:
    assert set(HANDLERS) == set(CALLS)
    for name in HANDLERS:
        assert callable(getattr(WorldActor, name)), name  # the Ray actor answers it too
        problem = replies.reply_problem(name, ("ok", None), None)
        assert problem != f"a reply to an unknown call {name!r}"


def test_a_worker_part_importing_the_runtime_breaks_the_worker_layers(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    shutil.copytree(ROOT / "rlenv", copy / "rlenv", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "rlenv/worker/capture.py"
    target.write_text(target.read_text() + "\nfrom rlenv.worker import runtime  # noqa\n")
    result = _lint_imports(copy)
    assert result.returncode != 0
    assert "Worker: protocol > runtime" in result.stdout
    assert "BROKEN" in result.stdout


def test_tool_calls_are_numbered_within_their_turn() -> None:
    seen: list[tuple[int, int]] = []

    async def call(tool_call: dict, turn: int, number: int) -> ToolOutcome:
        seen.append((turn, number))
        return ToolOutcome("ok", "none", True)

    call_tool = numbered_tool_calls(call)

    async def calls() -> None:
        for turn in (0, 0, 1, 0, 1, 2):
            await call_tool({}, turn)

    asyncio.run(calls())
    assert seen == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0)]


def test_a_policy_changing_its_request_does_not_change_the_conversation() -> None:
    request = request_maker([], {"temperature": 0.0}, 7, "in-1", 2)
    conversation = [{"role": "user", "content": "hi", "parts": [{"text": "hi"}]}]
    made = request(conversation, 3)
    made.messages[0]["parts"][0]["text"] = "changed"
    made.messages.append({"role": "assistant", "content": "x"})
    assert conversation == [{"role": "user", "content": "hi", "parts": [{"text": "hi"}]}]
    assert (made.seed, made.input_id, made.rollout, made.turn) == (7, "in-1", 2, 3)
