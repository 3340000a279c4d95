"""What the runner needs from a place where rollouts execute (`local` processes or `ray` actors).

Every call is a pure function of the task and the spec's files, so any executor gives the same
records: the run digest does not depend on where rollouts ran. A rollout whose policy runs
outside the frozen world is driven by the runner as prepare, tool calls, finish, all on the
worker that prepared it (its snapshot copy lives on that worker's disk).
"""

from __future__ import annotations

from typing import Any, Protocol

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.worker import RolloutTask


class Executor(Protocol):
    async def run_rollout(self, task: RolloutTask) -> dict[str, Any]:
        """A whole rollout with the policy inside the world; the sealed record."""
        ...

    async def prepare(self, task: RolloutTask) -> None:
        """A fresh snapshot copy for a rollout driven from outside the world."""
        ...

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int
    ) -> ToolOutcome:
        """One tool call of a prepared rollout, in its workdir, under the frozen world."""
        ...

    async def finish(self, task: RolloutTask, trajectory: Trajectory, model: str) -> dict[str, Any]:
        """Grade a prepared rollout's trajectory; the sealed record (the workdir is removed)."""
        ...

    async def grade(self, record: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
        """`rlenv grade`: a record's deferred verifiers run; with grader-cache hits, misses."""
        ...

    def close(self) -> None:
        """Stop the workers and remove what they left."""
        ...
