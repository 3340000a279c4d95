"""What the runner needs from a place where rollouts execute (`local` processes or `ray` actors).

Every call is a pure function of the task and the spec's files, so any executor gives the same
records: the run digest does not depend on where rollouts ran. A rollout whose policy runs
outside the frozen world is driven by the runner as prepare, tool calls (and a simulated user's
turns), finish, all on the worker that prepared it (its snapshot copy lives on that worker's disk).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.errors import WorkerLost
from rlenv.results import RolloutRecord
from rlenv.worker.config import RolloutTask

START_TIMEOUT_S = 1800.0
"""How long a (replacement) worker may take to enter the frozen world (loading a reward model
included): generous, a loaded 2-core machine took over 5 minutes to load MiniLM in two
workers at once; a worker that dies while starting is reported at once."""


CALLS = {
    "run_rollout": ("policy_error", "rollout"),
    "prepare": ("policy_error", "snapshot copy"),
    "tool": ("tool_error", "tool call"),
    "user": ("tool_error", "user turn"),
    "finish": ("verifier_error", "grading"),
    "grade": ("verifier_error", "grading"),
}
"""Per executor call: the status of a rollout whose worker died under it when nothing more
precise is known (never ``infra_error``: env code must not take its rollout out of the scores
by killing its worker), and how an error names the call."""


def death_error(where: str, how: str | None = None) -> str:
    """The error of a rollout whose worker died in `where` (a phase or a call's name)."""
    return f"the worker process died in the {where}" + (f" ({how})" if how else "")


def backstop(timeout_s: float) -> float:
    """How long the orchestrator waits for a call limited to `timeout_s` before it kills the
    worker: the in-worker alarm stops ordinary overruns at `timeout_s` (cheap: the worker
    lives on), and the grace leaves it time to make the timeout record first."""
    return timeout_s + 1.0 + 0.1 * timeout_s


def host_backstop(timeout_s: float) -> float:
    """How long a driver waits for a host of workers (a Ray actor running a local executor)
    before it kills the host: past the worker's own `backstop`, plus the time the host's
    executor may take to start the worker's replacement (`START_TIMEOUT_S`), so the host
    always acts first and a lost call arrives as its `WorkerLost`. Only a host that itself
    stops answering (no env code runs in it) meets this limit."""
    return backstop(timeout_s) + START_TIMEOUT_S


class Executor(Protocol):
    """Every call that runs env code is limited: past `backstop(timeout)` the worker is killed
    (with everything it started) and replaced, and the call raises `rlenv.errors.WorkerLost`
    (so does a call whose worker died). The runner records such a rollout with
    `rlenv.worker.lost.lost_record`."""

    @property
    def workers(self) -> int:
        """How many rollouts run at once (worker processes, actors)."""
        ...

    async def run_rollout(self, task: RolloutTask, timeout: float) -> RolloutRecord:
        """A whole rollout with the policy inside the world; the sealed record."""
        ...

    def run_batch(
        self, tasks: list[RolloutTask], timeout: float
    ) -> AsyncGenerator[tuple[RolloutTask, RolloutRecord | WorkerLost | None], None]:
        """Whole rollouts in the world, one after another on one worker: (task, record) as
        each ends; (task, WorkerLost) for the one its worker overran or died in, and (task,
        None) for each it did not reach then (the caller runs those again)."""
        ...

    async def prepare(self, task: RolloutTask) -> None:
        """A fresh snapshot copy for a rollout driven from outside the world."""
        ...

    async def tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int, timeout: float
    ) -> ToolOutcome:
        """One tool call of a prepared rollout, in its workdir, under the frozen world."""
        ...

    async def user(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int, timeout: float
    ) -> str | None:
        """The simulated user's next message in a prepared rollout (None: it has no more to
        say), made in the frozen world as a tool call is (a model user replayed)."""
        ...

    async def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, timeout: float
    ) -> RolloutRecord:
        """Grade a prepared rollout's trajectory; the sealed record (the workdir is removed)."""
        ...

    async def grade(self, record: RolloutRecord, timeout: float) -> tuple[RolloutRecord, int, int]:
        """`rlenv grade`: a record's deferred verifiers run; with grader-cache hits, misses."""
        ...

    def close(self) -> None:
        """Stop the workers and remove what they left."""
        ...


async def one_by_one(
    executor: Executor, tasks: list[RolloutTask], timeout: float
) -> AsyncGenerator[tuple[RolloutTask, RolloutRecord | WorkerLost | None], None]:
    """`Executor.run_batch` as one `run_rollout` call per task."""
    for task in tasks:
        try:
            yield task, await executor.run_rollout(task, timeout)
        except WorkerLost as lost:
            yield task, lost
