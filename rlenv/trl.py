"""rlenv in the training loop (TRL's GRPOTrainer; extra ``trl``).

The frozen env trains and judges with the same recorded world: `dataset` gives the spec's
training prompts (never the held-out ones), `reward_funcs` one named TRL reward function per
composite-reward component, `environment_factory` a class whose public methods are the spec's
tools (replayed from the cassettes), and every score is computed by a frozen-world worker
process exactly as `rlenv run` grades a rollout (frozen clock, replayed tools, sandboxed code
verifiers), so a trajectory gets the same record — and digest — here as there.

    from trl import GRPOConfig, GRPOTrainer
    import rlenv.trl as rt

    spec = "envs/search.yaml"
    trainer = GRPOTrainer(
        model=..., reward_funcs=rt.reward_funcs(spec), train_dataset=rt.dataset(spec),
        args=GRPOConfig(reward_weights=rt.reward_weights(spec), ...),
    )
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.agent import ToolOutcome, Trajectory
from rlenv.env import Environment, load_environment
from rlenv.errors import UserError
from rlenv.grade_cache import component_failure
from rlenv.inputs import EnvInput, load_inputs
from rlenv.results import ToolCallRecord, seal
from rlenv.tool_methods import tool_method
from rlenv.verifiers.judge import Judges
from rlenv.worker.config import RolloutTask, WorkerConfig

MODEL = "trl"  # the `model` field of records scored in training


class UserTurnsNotPlayed(UserWarning):
    """The env has a simulated user (``user:``) and TRL's tool loop has no user turns."""


_USER_WARNED: set[str] = set()


def _environment(spec: str | Path) -> Environment:
    return load_environment(spec, purpose="run")


def _warn_user_not_played(prepared: Environment) -> None:
    """One warning line per env (not one per call): training here plays no user turns, so the
    reward is not the one `rlenv run` or `rlenv serve` gives a conversation."""
    spec = prepared.loaded.spec
    key = str(prepared.loaded.path)
    if spec.user is None or key in _USER_WARNED:
        return
    _USER_WARNED.add(key)
    warnings.warn(
        f"env {spec.name!r} has a simulated user (user:), but TRL's environment_factory plays"
        " tool turns only: its user turns are not played in training, and the reward is computed"
        " on the prompt and the model's completion alone (its tool calls, no user turns;"
        " `rlenv run` and `rlenv serve` play the user)",
        UserTurnsNotPlayed,
        stacklevel=3,
    )


def _train_records(prepared: Environment) -> list[EnvInput]:
    loaded = prepared.loaded
    if loaded.spec.train_inputs is None:
        raise UserError(
            "the spec has no train_inputs: training uses its own prompts, never the held-out"
            " inputs (add train_inputs: {path, sha256})",
            where=prepared.where(),
        )
    return load_inputs(
        loaded.source_path(loaded.spec.train_inputs), templated=loaded.spec.prompt is not None
    )


def dataset(spec: str | Path, split: str = "train") -> Any:
    """A `datasets.Dataset` of the spec's training prompts: ``prompt`` (conversational
    messages: system prompt, few-shot, the input's prompt) and ``rlenv_id``. The held-out
    inputs are for evaluation only: asking for them is an error."""
    if split != "train":
        raise UserError(
            f"split {split!r}: only the 'train' split can be trained on; the held-out inputs are"
            " evaluated by `rlenv run` / RlenvCallback, never trained on"
        )
    from datasets import Dataset

    prepared = _environment(spec)
    spec_model = prepared.loaded.spec
    rows = [
        {
            "prompt": record.messages(spec_model.system_prompt, spec_model.prompt),
            "rlenv_id": record.id,
        }
        for record in _train_records(prepared)
    ]
    return Dataset.from_list(rows)


# ---------------------------------------------------------------------------------------------
# One frozen-world worker process, driven synchronously from the trainer.


class FrozenWorld:
    """A frozen-world worker (a spawned process, as `rlenv run` uses) over the training inputs;
    rollouts are numbered per input in the order they are started, so seeds repeat run to run."""

    def __init__(self, spec: str | Path) -> None:
        from rlenv.executors import make_executor

        prepared = _environment(spec)
        self.loaded = prepared.loaded
        records = _train_records(prepared)
        self.index = {record.id: record.index for record in records}
        # a judge in record_missing or live mode judges here, outside the world
        self.judges = Judges(self.loaded, {str(r.id): r.data for r in records}, None)
        self.rollouts: dict[str, int] = {}
        self.work_root = Path(tempfile.mkdtemp(prefix="rlenv-trl-"))
        config = WorkerConfig(
            spec_path=str(prepared.loaded.path),
            work_root=str(self.work_root),
            allowed_endpoints=prepared.reward_endpoints,
            split="train",
        )
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()
        self.executor: Any = make_executor("local", config, 1)
        atexit.register(self.close)

    def _run(self, coroutine: Any) -> Any:
        with self.lock:
            return self.loop.run_until_complete(coroutine)

    def task(self, input_id: str) -> RolloutTask:
        if input_id not in self.index:
            raise UserError(f"no training input with id {input_id!r}")
        rollout = self.rollouts.get(input_id, 0)
        self.rollouts[input_id] = rollout + 1
        return RolloutTask(self.index[input_id], rollout)

    def prepare(self, task: RolloutTask) -> None:
        self._run(self.executor.prepare(task))

    def tool(self, task: RolloutTask, call: dict[str, Any], turn: int, number: int) -> ToolOutcome:
        """One tool call, under the spec's `limits.timeout_s` (a worker that overruns is
        replaced, as in `rlenv run`)."""
        timeout = self.loaded.spec.limits.timeout_s
        return self._run(self.executor.tool(task, call, turn, number, timeout))  # type: ignore[no-any-return]

    def finish(self, task: RolloutTask, trajectory: Trajectory) -> dict[str, Any]:
        timeout = self.loaded.spec.limits.timeout_s
        record = self._run(self.executor.finish(task, trajectory, MODEL, timeout))
        return seal(self.judges.settle(record))  # its digest, as its results line would hold

    def close(self) -> None:
        executor = getattr(self, "executor", None)
        if executor is not None:
            self.executor = None
            executor.close()
            self.loop.close()
        shutil.rmtree(self.work_root, ignore_errors=True)


_worlds: dict[str, FrozenWorld] = {}


def world(spec: str | Path) -> FrozenWorld:
    """The process's one frozen world for a spec (started on first use)."""
    key = str(Path(spec).resolve())
    if key not in _worlds:
        _worlds[key] = FrozenWorld(spec)
    return _worlds[key]


# ---------------------------------------------------------------------------------------------
# Reward functions.


class RewardError(RuntimeError):
    """A reward component could not score a completion (and declares no `fallback`): a judge
    that was never asked this, a verifier or reward function that raised, a rollout that ended
    before grading. Training on a silent None or 0 would be training on nothing."""


@dataclass(frozen=True)
class _Component:
    name: str
    weight: float
    verifier: str | None = None  # the verifier it reads (None: reward model or function)
    fallback: float | None = None


def _components(prepared: Environment) -> list[_Component]:
    """The reward components in order: the spec's `reward:` block, else the verifiers' pass
    (1/0) and, when the spec has one, the reward model's score."""
    spec = prepared.loaded.spec
    if spec.reward is not None:
        return [
            _Component(name, c.weight, c.verifier, c.fallback)
            for name, c in spec.reward.components.items()
        ]
    components = [_Component("passed", 1.0)]
    if spec.reward_model is not None:
        components.append(_Component("reward_model", 1.0))
    return components


def _value(record: dict[str, Any], name: str) -> float | None:
    rewards = record.get("rewards")
    if rewards is not None:
        value = rewards.get(name)
    elif name == "passed":
        value = None if record.get("passed") is None else float(record["passed"])
    else:
        value = record.get("reward")
    return None if value is None else float(value)


def _messages(prompt: Any, completion: Any) -> list[dict[str, Any]]:
    head = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if isinstance(completion, str):
        return [*head, {"role": "assistant", "content": completion}]
    return [*head, *(dict(message) for message in completion)]


class _Scorer:
    """Scores a batch once for all the components' reward functions (TRL calls each with the
    same batch), each completion graded by the frozen world like a rollout of `rlenv run`."""

    def __init__(self, spec: str | Path) -> None:
        self.spec = spec
        self.last: tuple[Any, list[dict[str, Any]]] | None = None

    def records(
        self,
        prompts: list[Any],
        completions: list[Any],
        ids: list[str],
        environments: list[Any] | None,
    ) -> list[dict[str, Any]]:
        key = (
            tuple(ids),
            tuple(json.dumps(c, sort_keys=True, default=str) for c in completions),
            tuple(id(e) for e in environments or ()),
        )
        if self.last is not None and self.last[0] == key:
            return self.last[1]
        frozen = world(self.spec)
        records = []
        for position, (prompt, completion, input_id) in enumerate(
            zip(prompts, completions, ids, strict=True)
        ):
            environment = environments[position] if environments else None
            trajectory = Trajectory(messages=_messages(prompt, completion))
            if isinstance(environment, RlenvEnvironment) and environment._task is not None:
                task = environment._task
                trajectory.tool_calls = environment._calls
                environment._task = None  # finished: its workdir is gone
            else:
                task = frozen.task(str(input_id))
                frozen.prepare(task)
            records.append(frozen.finish(task, trajectory))
        frozen.judges.close()  # record_missing: this batch's judgments join the cassette
        self.last = (key, records)
        return records


def reward_funcs(spec: str | Path) -> list[Callable[..., list[float | None]]]:
    """One TRL reward function per component, named after it (TRL logs
    ``rewards/<name>/mean``); pass `reward_weights(spec)` as GRPOConfig(reward_weights=...).
    The dataset must carry ``rlenv_id`` (as `dataset` gives it)."""
    prepared = _environment(spec)
    _train_records(prepared)
    _warn_user_not_played(prepared)
    scorer = _Scorer(spec)
    functions = []
    for component in _components(prepared):

        def score(
            prompts: list[Any],
            completions: list[Any],
            rlenv_id: list[str],
            environments: list[Any] | None = None,
            log_metric: Callable[[str, float], None] | None = None,
            _component: _Component = component,
            **_: Any,
        ) -> list[float | None]:
            records = scorer.records(prompts, completions, rlenv_id, environments)
            values: list[float | None] = []
            errors = 0
            for record in records:
                value = _value(record, _component.name)
                failure = component_failure(record, _component.name, _component.verifier, value)
                if failure is not None:
                    if _component.fallback is None:
                        raise RewardError(_one_line(_component.name, record, failure))
                    errors += 1
                    value = _component.fallback
                values.append(value)
            if log_metric is not None:
                log_metric(f"rewards/{_component.name}/errors", float(errors))
            return values

        score.__name__ = score.__qualname__ = component.name
        functions.append(score)
    return functions


def _one_line(name: str, record: dict[str, Any], failure: str) -> str:
    where = f"input {record.get('input_id')} (rollout {record.get('rollout')})"
    reason = " ".join(str(failure).split())
    return (
        f"reward component {name!r} cannot score {where}: {reason}"
        " (declare reward.components.NAME.fallback to train on a fallback value instead)"
    )


def reward_weights(spec: str | Path) -> list[float]:
    """The components' weights, in `reward_funcs` order."""
    return [component.weight for component in _components(_environment(spec))]


# ---------------------------------------------------------------------------------------------
# An environment TRL instantiates per rollout.


class RlenvEnvironment:
    """Base of the classes `environment_factory` builds: the frozen world for one rollout."""

    _spec: str = ""
    _task: RolloutTask | None = None
    _calls: list[ToolCallRecord]
    _turn: int = 0

    def reset(self, **row: Any) -> str | None:
        """Enter the frozen world for this input (a fresh snapshot copy)."""
        frozen = world(self._spec)
        self._task = frozen.task(str(row["rlenv_id"]))
        self._calls = []
        self._turn = 0
        frozen.prepare(self._task)
        return None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._task is None:
            raise RuntimeError("reset() first: no rollout in progress")
        number = len(self._calls)
        call: dict[str, Any] = {
            "id": f"call_{number}",
            "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
        }
        outcome = world(self._spec).tool(self._task, call, self._turn, number)
        self._calls.append(
            {
                "turn": self._turn,
                "id": call["id"],
                "name": name,
                "arguments": arguments,
                "fixture": outcome.fixture,
                "ok": outcome.ok,
            }
        )
        return outcome.content


def environment_factory(spec: str | Path) -> type[RlenvEnvironment]:
    """A class for GRPOTrainer(environment_factory=...): `reset(**row)` enters the frozen world
    for the row's ``rlenv_id``, the spec's tools are its public methods (replayed from the
    cassettes; a miss is the spec's `on_miss`), and `reward_funcs(spec)` grade the finished
    rollout in that same world (its files, its tool calls). An env with a simulated user is
    trained without its user turns (TRL's loop has none): a `UserTurnsNotPlayed` warning says so."""
    prepared = _environment(spec)
    _train_records(prepared)
    _warn_user_not_played(prepared)
    namespace: dict[str, Any] = {"_spec": str(Path(spec).resolve())}
    for tool in prepared.loaded.spec.tools:
        namespace[tool.name] = tool_method(tool.name, tool.description, tool.parameters)
    name = "".join(
        part.capitalize() for part in prepared.loaded.spec.name.replace("-", "_").split("_")
    )
    return type(f"{name}Env", (RlenvEnvironment,), namespace)


# ---------------------------------------------------------------------------------------------
# Evaluating each checkpoint the trainer saves.


def _callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


class RlenvCallback(_callback_base()):  # type: ignore[misc]
    """Evaluate the starting model (``step-0``) when training begins and each checkpoint when
    it is saved (every `every`-th save step when given): the held-out env on that checkpoint
    (``hf:`` provider, KL against the initial model) into a normal run directory
    ``OUTPUT_DIR/rlenv/step-N`` (`rlenv compare` works on them), judged against step-0
    (:class:`rlenv.watch.Verdicts`), and logged as ``rlenv/...`` scalars -- the summary's
    headline numbers, ``rlenv/verdict`` (0 healthy, 1 inconclusive, 2 regressed,
    3 reward_hacking), ``rlenv/verdict_run`` and ``rlenv/signals/<name>`` -- to the trainer's
    loggers (TensorBoard, W&B), with ``rlenv/checkpoint_step`` saying which checkpoint.

    With `background` (the default) the evaluations run in a thread, one at a time, so
    training does not wait for them; finished ones are logged at the next step, and the
    callback waits for the rest when training ends.

        trainer = GRPOTrainer(...)
        RlenvCallback("envs/search.yaml", limit=20).attach(trainer)
    """

    def __init__(
        self,
        spec: str | Path,
        *,
        every: int | None = None,
        reference: str | Path | None = None,
        out: str | Path | None = None,
        limit: int | None = None,
        rollouts: int | None = None,
        background: bool = True,
    ) -> None:
        from rlenv.watch import Verdicts

        _environment(spec)  # a broken env is an error now, not at the first save
        self.spec = spec
        self.every = every
        self.reference = reference
        self.out = out
        self.limit = limit
        self.rollouts = rollouts
        self.background = background
        self.trainer: Any = None
        self.evaluations: list[Any] = []
        self.verdicts = Verdicts()
        self._queue: Any = None
        self._thread: threading.Thread | None = None
        self._done: list[Any] = []  # finished, not yet logged (the trainer logs on its thread)
        self._failure: BaseException | None = None
        self._lock = threading.Lock()

    def attach(self, trainer: Any) -> RlenvCallback:
        """Register with `trainer`; its `log` then carries the scalars to every logger."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def _out_root(self, args: Any) -> Path:
        return Path(self.out) if self.out else Path(args.output_dir) / "rlenv"

    def _evaluate(self, checkpoint: Path, step: int, out_root: Path) -> None:
        from rlenv.watch import evaluate_checkpoint

        evaluation = evaluate_checkpoint(
            self.spec,
            checkpoint,
            step=step,
            out_root=out_root,
            reference=self.reference,
            limit=self.limit,
            rollouts=self.rollouts,
        )
        self.verdicts.add(evaluation)
        with self._lock:
            self.evaluations.append(evaluation)
            self._done.append(evaluation)

    def _submit(self, checkpoint: Path, step: int, out_root: Path) -> None:
        if not self.background:
            self._evaluate(checkpoint, step, out_root)
            return
        import queue

        if self._thread is None:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._serve, name="rlenv-eval", daemon=True)
            self._thread.start()
        self._queue.put((checkpoint, step, out_root))

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                if self._failure is None:
                    self._evaluate(*job)
            except BaseException as exc:  # raised on the trainer's thread at its next step
                self._failure = exc
            finally:
                self._queue.task_done()

    def _flush(self, state: Any) -> None:
        """Log what finished (on the trainer's thread); re-raise an evaluation's failure."""
        with self._lock:
            done, self._done = self._done, []
        for evaluation in done:
            scalars = {
                **evaluation.scalars,
                "rlenv/eval_seconds": evaluation.seconds,
                "rlenv/checkpoint_step": float(evaluation.step),
            }
            if self.trainer is not None:
                self.trainer.log(scalars)
            else:
                state.log_history.append({**scalars, "step": evaluation.step})
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any):
        if self.reference is None and model is not None:
            initial = getattr(getattr(model, "config", None), "_name_or_path", None)
            if initial and Path(initial).is_dir():
                self.reference = initial  # the model training started from
        if self.reference is not None and int(state.global_step) == 0:
            self._submit(Path(self.reference), 0, self._out_root(args))  # step-0: the base
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any):
        self._flush(state)
        return control

    def on_save(self, args: Any, state: Any, control: Any, **_: Any):
        step = int(state.global_step)
        if self.every and step % self.every:
            return control
        checkpoint = Path(args.output_dir) / f"checkpoint-{step}"
        if not checkpoint.is_dir():
            return control
        self._submit(checkpoint, step, self._out_root(args))
        self._flush(state)
        return control

    def wait(self) -> None:
        """Wait for every submitted evaluation to finish."""
        if self._queue is not None:
            self._queue.join()

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any):
        self.wait()
        self._flush(state)
        return control


__all__ = [
    "FrozenWorld",
    "RlenvCallback",
    "RlenvEnvironment",
    "RewardError",
    "UserTurnsNotPlayed",
    "dataset",
    "environment_factory",
    "reward_funcs",
    "reward_weights",
    "world",
]
