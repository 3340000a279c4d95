"""What a frozen-world worker is told: its configuration when it starts (`WorkerConfig`) and,
per call, the rollout the call is about (`RolloutTask`). Plain data, cheap to import: the
orchestrator builds both without loading anything of the world."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec
    from rlenv.spec_data import LoadedData


@dataclass
class WorkerConfig:
    spec_path: str
    work_root: str
    model_uri: str | None = None  # set when the policy runs inside the world
    allowed_endpoints: list[tuple[str, int]] = field(default_factory=list)
    live_tools: bool = False  # recording: tools reach the network, no replay
    record_dir: str | None = None  # where `rlenv record` writes each tool's cassette
    # recording: each service's logical host -> the real HOST:PORT `rlenv record` started it on
    service_routes: dict[str, str] = field(default_factory=dict)
    expensive_fraction: float = 1.0
    defer_expensive: bool = False
    cache_dir: str | None = None  # grader cache for expensive verifiers; None: off
    parent_pid: int | None = None  # the orchestrator: a worker dies with it
    split: str = "heldout"  # "train": tasks index the spec's train_inputs (rlenv.trl)
    allow_weak_sandbox: bool = False  # code verifiers may run with rlimits only
    # no snapshot: a rollout's workdir starts empty, so the worker makes it at the rollout's
    # first call and a local executor need not send `prepare` (one round trip fewer)
    empty_workdir: bool = False
    # `rlenv run`: the env's checks that import its python modules, which the orchestrator
    # leaves to the world (`rlenv.env.world_problems` keyword arguments: purpose, model,
    # defer_expensive); what they find stops the start and is the user's to fix (exit 2)
    world_checks: dict[str, Any] | None = None
    # the spec at `spec_path` as the orchestrator loaded and validated it, sent as data: the
    # worker neither reads nor validates it again (building the spec's validators was a third
    # of a worker's start). None: the worker loads `spec_path` itself. Set by whoever has just
    # loaded that very path (the local executor); a config sent elsewhere (a Ray actor, which
    # unpacks the spec under another path) leaves it None. The local executor sends it as
    # records (`rlenv.spec_data.as_data`): a worker reads them without importing pydantic.
    loaded_spec: LoadedSpec | LoadedData | None = None


def spec_records(config: WorkerConfig) -> LoadedSpec:
    """The worker's spec as records (`rlenv.spec_data`), read alike however it came: as sent
    (`loaded_spec`), or loaded here (a Ray actor, an unpacked bundle: pydantic is imported
    then) and made records. Typed as the models the records mirror."""
    from rlenv.spec_data import as_data

    if config.loaded_spec is not None:
        return as_data(config.loaded_spec)  # type: ignore[no-any-return]
    from rlenv.spec import load_spec

    return as_data(load_spec(config.spec_path))  # type: ignore[no-any-return]


@dataclass(slots=True)
class RolloutTask:
    # a run holds one per rollout still to run (100k: 12.8 MB with a __dict__ each, 8.8 without)
    input_index: int
    rollout: int


class _Input(Protocol):  # rlenv.inputs.EnvInput, without importing it here
    @property
    def index(self) -> int: ...

    @property
    def id(self) -> str: ...


class PendingTasks:
    """Every (input, rollout) of the run not already in results.jsonl, in order, made as they
    are taken (a list of 100k tasks held 9 MB of the orchestrator for the whole run)."""

    def __init__(
        self, inputs: Sequence[_Input], rollouts_per_input: int, done: set[tuple[str, int]]
    ) -> None:
        self.inputs = inputs  # the run's own list: a copy of (index, id) was 62 bytes an input
        self.rollouts = rollouts_per_input
        self.done = done
        self.count = (
            sum(
                1
                for record in inputs
                for rollout in range(rollouts_per_input)
                if (record.id, rollout) not in done
            )
            if done
            else len(self.inputs) * rollouts_per_input
        )

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[RolloutTask]:
        for record in self.inputs:
            for rollout in range(self.rollouts):
                if not self.done or (record.id, rollout) not in self.done:
                    yield RolloutTask(record.index, rollout)


GC_THRESHOLD = (50_000, 20, 20)
"""The collector's thresholds while a run goes, in the orchestrator and in local workers:
Python's default (700, 10, 10) spent a quarter of the orchestrator's CPU at 10k rollouts
scanning the records it keeps; the run's objects are mostly acyclic, and a cycle only waits
a little longer to be freed."""
