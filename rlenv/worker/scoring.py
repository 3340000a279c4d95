"""Grading a finished rollout in a worker: the spec's verifiers run in order (`Verifiers`),
what grading found (`Verdict`: verifier results, reward, errors) and the results line made
from it and the trajectory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.agent import Trajectory
from rlenv.errors import VerifierCrash
from rlenv.grade_cache import (
    NOT_APPLICABLE,
    PENDING,
    SKIPPED,
    GraderCache,
    rollout_hash,
    sampled,
    verifier_identity,
)
from rlenv.inputs import EnvInput
from rlenv.results import RolloutRecord, VerifierRecord
from rlenv.verifiers import VerifierContext, build_verifiers
from rlenv.worker.config import RolloutTask, WorkerConfig
from rlenv.worker.timers import set_phase

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import LoadedSpec


@dataclass
class Verdict:
    """What grading a finished rollout found (all empty for an infrastructure error)."""

    changes: dict[str, Any]
    results: list[VerifierRecord] = field(default_factory=list)
    passed: bool | None = None
    reward: float | None = None
    reward_error: str | None = None
    cache_counts: dict[str, int] | None = None
    status: str | None = None  # verifier_error / reward_error: env code tried to end the process
    error: str | None = None
    rewards: dict[str, float | None] | None = None  # the composite reward's components + total
    traceback: list[str] = field(default_factory=list)  # the env's frames of `error`
    reward_traceback: list[str] = field(default_factory=list)  # ... of `reward_error`


def ungraded(config: Any, why: str) -> VerifierRecord:
    return {"name": config.label, "type": config.type, "passed": None, "score": None, "detail": why}


def rollout_record(
    record: EnvInput,
    task: RolloutTask,
    seed: int,
    model: str,
    trajectory: Trajectory,
    verdict: Verdict,
    sanitise: Callable[[str], str],
) -> RolloutRecord:
    """The results line of a graded rollout (not yet sealed)."""
    output: RolloutRecord = {
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


class Verifiers:
    """The spec's verifiers in this worker, built once; expensive ones sampled, deferred or
    served from the grader cache (keyed by each verifier's identity: config and source)."""

    def __init__(self, loaded: LoadedSpec, config: WorkerConfig) -> None:
        self.loaded = loaded
        self.config = config
        self.functions = build_verifiers(list(loaded.spec.verifiers))
        schemas = [v.schema_ for v in loaded.spec.verifiers if v.type == "json_schema"]
        if schemas:  # each rollout is graded in a fresh child: import its format libraries once
            from rlenv.json_schema import load_formats, schema_formats

            load_formats(name for schema in schemas for name in schema_formats(schema))
        self.cache: GraderCache | None = None
        self.identities: dict[str, Any] = {}
        if config.cache_dir:
            self._open_cache(Path(config.cache_dir))

    def _open_cache(self, root: Path) -> None:
        """The grader cache, and each expensive verifier's identity (config and source hash)
        in its keys: only those are cached, and an identity dumps the verifier's config
        (which builds pydantic's serializer for it: ~0.1 s of every worker's start)."""
        self.cache = GraderCache(root)
        expensive = [v for v in self.loaded.spec.verifiers if v.cost == "expensive"]
        if not expensive:
            return
        from rlenv.env import python_sources

        sources = python_sources(self.loaded)
        for verifier_config in expensive:
            module = (verifier_config.function or "").split(":", 1)[0]
            self.identities[verifier_config.label] = verifier_identity(
                verifier_config, sources.get(module)
            )

    def run(
        self,
        context: VerifierContext,
        task: RolloutTask,
        input_id: str,
        changes: dict[str, Any],
        *,
        only: set[str] | None = None,
        late: bool = False,
    ) -> list[VerifierRecord]:
        """Run the verifiers in order; expensive ones sampled, deferred or served from cache."""
        results: list[VerifierRecord] = []
        content: str | None = None
        crash: VerifierCrash | None = None
        set_phase("verifier")
        for verifier in self.functions:
            config = verifier.config
            if only is not None and config.label not in only:
                continue
            if config.when is not None and not config.when.applies(context.input):
                results.append(ungraded(config, NOT_APPLICABLE))
                continue
            if config.cost == "expensive":
                if not late and self.config.defer_expensive:
                    results.append(ungraded(config, PENDING))
                    continue
                if not late and not sampled(
                    self.loaded.spec.seed, input_id, task.rollout, self.config.expensive_fraction
                ):
                    results.append(ungraded(config, SKIPPED))
                    continue
                if self.cache is not None:
                    if content is None:
                        content = rollout_hash(
                            context.answer, context.messages, context.input, changes
                        )
                    key = self.cache.key(self.identities[config.label], content)
                    cached = self.cache.get(key)
                    if cached is None:
                        try:
                            cached = verifier(context).as_dict()
                        except VerifierCrash as exc:  # not cached; the others still run
                            crash = crash or exc
                            results.append(ungraded(config, str(exc)))
                            continue
                        self.cache.put(key, cached)
                    results.append(cached)
                    continue
            try:
                results.append(verifier(context).as_dict())
            except VerifierCrash as exc:  # the rollout is a verifier_error; the others still run
                crash = crash or exc
                results.append(ungraded(config, str(exc)))
        if crash is not None:
            crash.results = results
            raise crash
        return results
