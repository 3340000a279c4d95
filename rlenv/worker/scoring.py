"""What grading a finished rollout produces in a worker: the `Verdict` (verifier results,
reward, errors) and the results line made from it and the trajectory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlenv.agent import Trajectory
from rlenv.grading import PENDING
from rlenv.inputs import InputRecord
from rlenv.worker.config import RolloutTask


@dataclass
class Verdict:
    """What grading a finished rollout found (all empty for an infrastructure error)."""

    changes: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    passed: bool | None = None
    reward: float | None = None
    reward_error: str | None = None
    cache_counts: dict[str, int] | None = None
    status: str | None = None  # verifier_error / reward_error: env code tried to end the process
    error: str | None = None
    rewards: dict[str, float | None] | None = None  # the composite reward's components + total
    traceback: list[str] = field(default_factory=list)  # the env's frames of `error`
    reward_traceback: list[str] = field(default_factory=list)  # ... of `reward_error`


def ungraded(config: Any, why: str) -> dict[str, Any]:
    return {"name": config.label, "type": config.type, "passed": None, "score": None, "detail": why}


def rollout_record(
    record: InputRecord,
    task: RolloutTask,
    seed: int,
    model: str,
    trajectory: Trajectory,
    verdict: Verdict,
    sanitise: Callable[[str], str],
) -> dict[str, Any]:
    """The results line of a graded rollout (not yet sealed)."""
    output: dict[str, Any] = {
        "input_id": record.id,
        "input_index": record.index,
        "rollout": task.rollout,
        "seed": seed,
        "model": model,
        "status": verdict.status or trajectory.status,
        "error": sanitise(error) if (error := verdict.error or trajectory.error) else None,
        "messages": trajectory.messages,
        "tool_calls": trajectory.tool_calls,
        "answer": trajectory.answer,
        "verifiers": verdict.results,
        "passed": verdict.passed,
        "reward": verdict.reward,
        "usage": trajectory.usage,
        "world": verdict.changes,
    }
    if verdict.rewards is not None:
        output["rewards"] = verdict.rewards
    frames = verdict.traceback if verdict.error else trajectory.traceback
    if output["error"] and frames:  # only on errors: other records stay as they were
        output["traceback"] = frames
    if verdict.reward_error:
        output["reward_error"] = verdict.reward_error
        if verdict.reward_traceback:
            output["reward_traceback"] = verdict.reward_traceback
    if any(result["detail"] == PENDING for result in verdict.results):
        output["grading"] = PENDING
    if verdict.cache_counts is not None:
        output["timing"] = {"grader_cache": verdict.cache_counts}
    if trajectory.logprobs is not None:
        output["logprobs"] = trajectory.logprobs
    if trajectory.extra:
        output["extra"] = trajectory.extra
    if trajectory.kl_parts:
        from rlenv.policy_shift.kl import merge_shift_records

        output["kl"] = merge_shift_records(trajectory.kl_parts)
    return output
