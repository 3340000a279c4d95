"""The records of rollouts that were lost: stopped by their timer, or whose worker died. Made
the same way in a worker and in the orchestrator, so a record does not depend on which one
stopped the rollout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlenv.agent import Trajectory
from rlenv.grade_cache import PENDING
from rlenv.inputs import EnvInput
from rlenv.results import RolloutRecord, seal
from rlenv.seeding import derive_seed
from rlenv.worker.config import RolloutTask

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import LoadedSpec


def lost_record(
    loaded: LoadedSpec,
    inputs: Sequence[EnvInput],
    task: RolloutTask,
    model: str,
    status: str,
    error: str,
) -> RolloutRecord:
    """The sealed record of a rollout that was stopped (timeout) or whose worker died: nothing
    of what it did is kept (how far it got depends on timing), it is not graded and does not
    pass. Made the same way in a worker (the alarm fired) and in the orchestrator (it killed the
    worker), so the record does not depend on which one stopped it."""
    record = inputs[task.input_index]
    messages = record.messages(loaded.spec.system_prompt)
    return seal(
        {
            "input_id": record.id,
            "input_index": record.index,
            "rollout": task.rollout,
            "seed": derive_seed(loaded.spec.seed, record.id, task.rollout),
            "model": model,
            "status": status,
            "error": error,
            "messages": messages,
            "tool_calls": [],
            "answer": None,
            "verifiers": [],
            "passed": False,
            "reward": None,
            "usage": Trajectory(messages=[]).usage,
            "world": {},
        }
    )


def late_grade_lost(record: RolloutRecord, status: str, error: str) -> RolloutRecord:
    """A record whose late grading was stopped (timeout) or whose worker died: its deferred
    verifiers stay ungraded, the status says why, and it does not pass."""
    updated = record.copy()
    updated.pop("grading", None)
    updated.pop("digest", None)
    updated["verifiers"] = [
        {**v, "detail": f"not graded: {status}"} if v["detail"] == PENDING else v
        for v in record["verifiers"]
    ]
    updated["status"], updated["error"], updated["passed"] = status, error, False
    return seal(updated)
