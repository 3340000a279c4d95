"""The world runtime: everything a frozen-world worker needs, built once from the spec (tools,
verifiers, reward model, the in-world policy, the replay cassette), then the frozen world is
entered for the worker's whole life. It runs whole rollouts (policy in the world), single tool
calls, and grading; a finished rollout is graded (verifiers, then the reward model) and sealed
with its digest here.

In-world code (policies, tools, verifiers, the python reward model) shares the worker's
process: it starts with the world's environment only (`rlenv.world.environment`), under the
kernel socket filter (`rlenv.world.sockets`), and what it writes to file descriptors 1 and 2
is captured per call (`rlenv.worker.capture`). The worker freezes the clock, refuses the
network, replays tool HTTP and fixes TZ and locale for its whole life (the mechanisms are in
`rlenv.world`; freezegun walks every module when it starts, so it starts once). Every call is
stateless apart from the rollout's snapshot copy on disk, so any worker can serve any call and
results do not depend on scheduling.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rlenv.agent import (
    ModelCall,
    RolloutTimeout,
    ToolCall,
    ToolCrash,
    ToolOutcome,
    Trajectory,
    rollout_loop,
    run_sync,
)
from rlenv.bounds import reply_problem
from rlenv.canonical import directory_manifest
from rlenv.errors import (
    FixtureMiss,
    ModelOutputError,
    PolicyCrash,
    VerifierCrash,
    env_frames,
)
from rlenv.files import sys_path
from rlenv.grade_cache import (
    PENDING,
)
from rlenv.providers.base import ModelReply
from rlenv.providers.registry import make_in_world_policy
from rlenv.results import RolloutRecord, VerifierRecord, seal
from rlenv.rewards import RewardContext, build_components, build_reward_model, composite
from rlenv.seeding import derive_seed, seed_everything, seed_globals
from rlenv.verifiers import VerifierContext
from rlenv.worker.config import RolloutTask, WorkerConfig, spec_records
from rlenv.worker.conversation import WorldUser, conversation_loop
from rlenv.worker.inputs import WorldInputs
from rlenv.worker.lost import lost_record
from rlenv.worker.policy_calls import json_copy, numbered_tool_calls, request_maker
from rlenv.worker.scoring import Verdict, Verifiers, rollout_record
from rlenv.worker.timers import install_alarm, rollout_timer, set_phase, timed_out, timeout_message
from rlenv.worker.tools import ToolContext, WorldTools, describe
from rlenv.world import netguard, snapshot
from rlenv.world.freeze import freeze_environment, freeze_python_clock, freeze_subprocess_clock
from rlenv.world.services import route_logical_hosts, service_urls, service_variables

TEXT_VERIFIERS = frozenset({"exact_match", "regex", "numeric", "contains", "json_schema"})
"""The verifier types that read the answer and the input only: rlenv's own code, which never
looks at the workdir or the working directory."""


class WorldRuntime:
    """Everything a worker needs, built once from the spec; then the frozen world is entered."""

    def __init__(self, config: WorkerConfig, *, freeze: bool = True) -> None:
        self.config = config
        # held for the worker's whole life: the process ends with it
        self._entered = contextlib.ExitStack()
        freeze_environment()
        if config.allow_weak_sandbox:
            from rlenv.sandbox.mechanism import WEAK_SANDBOX_VARIABLE  # not verifiers.code: 0.1 s

            os.environ[WEAK_SANDBOX_VARIABLE] = "1"  # read by the code verifiers, in this worker
        self.loaded = spec_records(config)
        spec = self.loaded.spec
        # tools see each service at its logical URL, whatever the host's environment says
        os.environ.update(service_variables(spec.services))
        self.services = service_urls(spec.services)
        if config.live_tools and config.service_routes:
            route_logical_hosts(config.service_routes)
        self._entered.enter_context(sys_path(self.loaded.python_paths()))
        if config.world_checks is not None:
            from rlenv.env import problems_to_data, world_problems

            problems = world_problems(self.loaded, **config.world_checks)
            if problems:
                raise WorldChecksFailed(problems_to_data(problems))
        self.work_root = Path(config.work_root)  # where env code sees its workdir
        # where this worker makes and removes workdirs: the work root itself, or (under
        # `places.PrivatePlaces.view`) the host's, which env code sees only its own part of
        self.real_root = self.work_root
        self.show: Callable[[str], None] | None = None  # the view's: one workdir visible
        self._work_root_text = str(self.work_root)
        self._names: tuple[tuple[int, int] | None, tuple[int, Path]] = (None, (0, self.work_root))
        inputs_path, source = self.loaded.inputs_path, spec.inputs
        if config.split == "train" and spec.train_inputs is not None:
            inputs_path, source = self.loaded.source_path(spec.train_inputs), spec.train_inputs
        self.inputs = WorldInputs(
            inputs_path, templated=spec.prompt is not None, rows=source.dataset is not None
        )
        self.tools = WorldTools(self.loaded, config, self.sanitise)
        self.user = WorldUser(self.loaded, config, self.tools) if spec.user else None
        judged = any(verifier.type == "judge" for verifier in spec.verifiers)
        if judged:
            from rlenv.verifiers import judge

            judge.configure(
                live=config.live_tools,
                spec_root=self.loaded.root,
                record_dir=Path(config.record_dir) if config.record_dir else None,
            )
        self.verifiers = Verifiers(self.loaded, config)
        self.cache = self.verifiers.cache
        self.reward = build_reward_model(spec.reward_model, self.loaded.root)
        self.reward_components = build_components(spec.reward)
        self.snapshot_path = self.loaded.snapshot_path
        self._frozen_time = spec.time.isoformat()
        # copied per rollout (env code may change it); not `model_dump`, whose serializer the
        # worker would build (the spec is sent built: `WorkerConfig.loaded_spec`)
        self._decoding = dict(spec.decoding)
        self.snapshot_manifest = (
            directory_manifest(self.snapshot_path) if self.snapshot_path else []
        )
        self._spare: Path | None = None  # the last workdir, put aside for the next rollout
        self._spare_name = f".empty-{os.getpid()}"
        # what a fresh empty workdir looks like (`snapshot.directory_state`); None: none yet,
        # or the workdirs are snapshot copies (never reused)
        self._fresh_state: tuple[Any, ...] | None = None
        self.policy: Any = make_in_world_policy(config.model_uri) if config.model_uri else None
        # no snapshot, and nothing in a rollout that runs env code or reads its workdir: a
        # replayed or outside policy, no tool, no simulated user, text verifiers only, no reward
        # model. Its rollouts get no workdir on disk: theirs would be empty from start to end
        # (`world` is then always "nothing changed"), and no code that could tell is run; nor
        # is there anything to clean up after a call (`rlenv.worker.protocol._settle`).
        self.inert = (
            self.snapshot_path is None
            and not self.conversation_runs_env_code()
            and all(verifier.type in TEXT_VERIFIERS for verifier in spec.verifiers)
            and self.reward is None
            and spec.reward is None
        )
        # no tool, no judge: no recorded HTTP to serve, and nothing to import vcrpy for (a
        # third of a worker's start); HTTP from a policy or verifier meets the network guard
        if not config.live_tools and (spec.tools or judged or (spec.user and spec.user.model)):
            from rlenv.world.replay import replay_cassette, spec_indexes
            from rlenv.world.scrub import spec_scrubber

            self.tools.cassette = self._entered.enter_context(
                replay_cassette(
                    spec_indexes(self.loaded, spec_scrubber(self.loaded)),
                    self.work_root / ".replay-none.yaml",
                )
            )
        from rlenv.sandbox import faketime_env

        freeze_subprocess_clock(faketime_env(spec.time.isoformat(), "UTC"))
        if not config.live_tools:
            netguard.install(config.allowed_endpoints)
        # Before any rollout's timer (an embedding model or a checkpoint can take longer to
        # load than limits.timeout_s allows a rollout) and before freezegun swaps the datetime
        # classes (C extensions built against datetime's C API, e.g. pandas, which the model's
        # libraries may import, crash when imported under the fake classes).
        preload = getattr(self.reward, "preload", None)
        if preload is not None:
            with contextlib.suppress(Exception):  # it fails again, as reward_error, when used
                preload()
        if freeze:
            self._freezer = freeze_python_clock(spec.time)
        install_alarm()

    # -- pieces of a rollout -------------------------------------------------------------

    def seed_of(self, task: RolloutTask) -> int:
        return self._names_of(task)[0]

    def workdir_of(self, task: RolloutTask) -> Path:
        return self._names_of(task)[1]

    def _names_of(self, task: RolloutTask) -> tuple[int, Path]:
        """The task's seed and workdir, made once for the task at hand (a rollout asks for
        them several times); both depend on the task alone."""
        key = (task.input_index, task.rollout)
        if self._names[0] != key:
            record = self.inputs[task.input_index]
            seed = derive_seed(self.loaded.spec.seed, record.id, task.rollout)
            self._names = (key, (seed, self.work_root / f"{key[0]}-{key[1]}"))
        return self._names[1]

    def real_workdir_of(self, task: RolloutTask) -> Path:
        """The task's workdir as this worker reaches it (`real_root`)."""
        return self.real_root / self.workdir_of(task).name

    def show_workdir(self, task: RolloutTask) -> None:
        """Make the task's workdir the one env code can see (nothing to do without a view)."""
        if self.show is not None:
            self.show(self.workdir_of(task).name)

    def conversation_runs_env_code(self) -> bool:
        """Whether a conversation in this world runs env code: a policy of the env's in the
        world (``python:``), a tool or a simulated user. A replayed policy (``replay:``,
        rlenv's own code reading data) or one outside the world (``openai:``), in an env with
        neither, runs none."""
        policy = self.policy
        policy_of_env = policy is not None and getattr(policy, "env_code", True) is not False
        return policy_of_env or bool(self.tools.functions) or self.user is not None

    def prepare(self, task: RolloutTask) -> None:
        if self.inert:
            return
        self.tools.load_wanted()  # off the rollout's clock, before its child is forked
        self._prepare(task)
        self.show_workdir(task)

    def _prepare(self, task: RolloutTask) -> None:
        destination = self.real_workdir_of(task)
        if self._spare is not None:
            spare, self._spare = self._spare, None
            try:  # an emptied workdir, renamed: a directory made and removed per rollout cost
                os.rename(spare, destination)  # milliseconds on ext4
            except OSError:
                _discard(spare)
            else:
                # Checked here, not when it was put aside: by now whatever the earlier call
                # started is dead and cannot write into it any more.
                if snapshot.directory_state(destination) == self._fresh_state:
                    os.utime(destination)  # its times as a fresh one's: nothing carried over
                    return
                _discard(destination)  # perhaps a link or a file the rollout put there
        snapshot.fresh_copy(self.snapshot_path, destination)
        if self.snapshot_path is None and self._fresh_state is None:
            self._fresh_state = snapshot.directory_state(destination)

    def release(self, task: RolloutTask) -> None:
        """Remove a rollout's workdir; without a snapshot, it is put aside instead, and the
        next rollout takes it if it is then empty and as a fresh one is (`prepare`)."""
        if self.inert:
            return
        workdir = self.real_workdir_of(task)
        if self._spare is None and self._fresh_state is not None:
            spare = self.real_root / self._spare_name
            try:
                os.rename(workdir, spare)
                self._spare = spare
                return
            except OSError:
                pass
        shutil.rmtree(workdir, ignore_errors=True)

    def _changes(self, workdir: Path) -> dict[str, Any]:
        """What the rollout changed in its workdir (nothing, when it has none on disk)."""
        if self.inert:
            return {"added": {}, "removed": [], "modified": {}}  # `snapshot.changes`'s empty
        return snapshot.changes(self.snapshot_manifest, workdir)

    def sanitise(self, text: str) -> str:
        return text.replace(self._work_root_text, "<workdir>")

    def cache_counts(self) -> tuple[int, int]:
        """Grader-cache hits and misses so far in this worker ((0, 0) without a cache)."""
        return (self.cache.hits, self.cache.misses) if self.cache else (0, 0)

    def call_tool(
        self, task: RolloutTask, call: dict[str, Any], turn: int, number: int
    ) -> ToolOutcome:
        """Validate the call, run the tool in the rollout's workdir, judge its fixture use."""
        parsed = self.tools.parse(call)
        if isinstance(parsed, ToolOutcome):  # the model's mistake, answered as the tool's
            return parsed
        name, arguments = parsed
        record = self.inputs[task.input_index]
        workdir = self.workdir_of(task)
        set_phase("tool")
        seed = derive_seed(self.seed_of(task), "tool", turn, number)
        context = ToolContext(
            seed, seed_everything(seed), record.id, task.rollout, workdir, turn, dict(self.services)
        )
        return self.tools.run(name, arguments, context)

    def lost(self, task: RolloutTask, model: str, status: str, error: str) -> RolloutRecord:
        return lost_record(self.loaded, self.inputs, task, model, status, error)

    def finish(
        self, task: RolloutTask, trajectory: Trajectory, model: str, *, sealed: bool = True
    ) -> RolloutRecord:
        """Verifiers first, reward model second, then the record; the workdir is removed.
        Under the rollout's timer: a rollout whose timer fired (in the policy, a tool, a
        verifier or the reward model, caught by env code or not) is a timeout record.
        `sealed`: with its digest (else the orchestrator's writer makes it, from the line)."""
        workdir = self.workdir_of(task)
        expired = trajectory.status == "timeout"
        self.tools.after_rollout(trajectory.tool_calls)
        try:
            if not expired:
                with _inside(None if self.inert else workdir):
                    if trajectory.status != "infra_error":
                        verdict = self._judge(task, trajectory)
                    else:
                        verdict = Verdict(self._changes(workdir))
        except RolloutTimeout:
            expired = True
        finally:
            self.release(task)
        if expired or timed_out():
            timeout_s = self.loaded.spec.limits.timeout_s
            return self.lost(task, model, "timeout", timeout_message(timeout_s))
        for result in verdict.results:
            if result["detail"]:
                result["detail"] = self.sanitise(result["detail"])
        made = rollout_record(
            self.inputs[task.input_index],
            task,
            self.seed_of(task),
            model,
            trajectory,
            verdict,
            self.sanitise,
        )
        return seal(made) if sealed else made

    def _judge(self, task: RolloutTask, trajectory: Trajectory) -> Verdict:
        """Grade a finished rollout in its workdir (the current directory)."""
        record = self.inputs[task.input_index]
        seed = self.seed_of(task)
        workdir = self.workdir_of(task)
        context = VerifierContext(
            answer=trajectory.answer,
            messages=trajectory.messages,
            input=record.data,
            workdir=workdir,
            seed=seed,
            frozen_time=self._frozen_time,
            snapshot=self.snapshot_path,
            snapshot_hashes=dict(self.snapshot_manifest),
        )
        seed_globals(derive_seed(seed, "verifiers"))
        verdict = Verdict(self._changes(workdir))
        hits, misses = self.cache_counts()
        try:
            verdict.results = self.verifiers.run(context, task, record.id, verdict.changes)
        except VerifierCrash as exc:  # the other verifiers' results and rewards are kept
            verdict.passed, verdict.status, verdict.error = False, "verifier_error", str(exc)
            verdict.traceback = exc.frames
            verdict.results = cast(list[VerifierRecord], exc.results)  # as run() made them
        if self.cache is not None:
            verdict.cache_counts = {
                "hits": self.cache.hits - hits,
                "misses": self.cache.misses - misses,
            }
        graded = [result for result in verdict.results if result["passed"] is not None]
        verdict.passed = verdict.status is None and all(result["passed"] for result in graded)
        if self.reward is None and self.loaded.spec.reward is None:
            return verdict  # no reward model, no composite reward: no prompt to render again
        reward_context = RewardContext(
            prompt=record.messages(self.loaded.spec.system_prompt, self.loaded.spec.prompt),
            answer=trajectory.answer,
            messages=trajectory.messages,
            input=record.data,
            workdir=workdir,
            seed=seed,
        )
        if self.reward is not None:
            set_phase("reward")
            seed_globals(derive_seed(seed, "reward"))
            try:
                verdict.reward = self.reward(reward_context)
            except Exception as exc:
                verdict.reward_error = self.sanitise(f"{type(exc).__name__}: {exc}")
                verdict.reward_traceback = env_frames(exc)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: never the run's end
                verdict.reward_error = self.sanitise(describe(exc))
                verdict.status, verdict.error = "reward_error", f"reward model: {describe(exc)}"
                verdict.reward_traceback = verdict.traceback = env_frames(exc)
        if self.loaded.spec.reward is not None:
            seed_globals(derive_seed(seed, "reward", "components"))
            verdict.rewards, error = composite(
                self.loaded.spec.reward,
                verdict.results,
                verdict.reward,
                self.reward_components,
                reward_context,
            )
            if error and not verdict.reward_error:
                verdict.reward_error = self.sanitise(error)
            if verdict.status == "verifier_error":  # the parts that scored; never a partial total
                verdict.rewards["total"] = None
        return verdict

    def grade_late(self, record: RolloutRecord) -> RolloutRecord:
        """`rlenv grade`: run a record's deferred verifiers; same result shape as inline."""
        task = RolloutTask(int(record["input_index"]), int(record["rollout"]))
        pending = {v["name"] for v in record["verifiers"] if v["detail"] == PENDING}
        data = self.inputs[task.input_index].data
        # a fresh snapshot copy (deferred verifiers do not see the final state); made even where
        # rollouts have no workdir on disk, as the late grade enters it
        self._prepare(task)
        self.show_workdir(task)
        workdir = self.workdir_of(task)
        try:
            with contextlib.chdir(workdir):
                seed_globals(derive_seed(int(record["seed"]), "verifiers"))
                context = VerifierContext(
                    answer=record["answer"],
                    messages=record["messages"],
                    input=data,
                    workdir=workdir,
                    seed=int(record["seed"]),
                    frozen_time=self._frozen_time,
                    snapshot=self.snapshot_path,
                    snapshot_hashes=dict(self.snapshot_manifest),
                )
                results = self.verifiers.run(
                    context, task, record["input_id"], record["world"], only=pending, late=True
                )
        except VerifierCrash as exc:
            crashed = record.copy()
            crashed["status"], crashed["error"] = "verifier_error", self.sanitise(str(exc))
            crashed["passed"] = False
            crashed.pop("grading", None)
            return seal(crashed)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        graded = {result["name"]: result for result in results}
        for result in graded.values():
            if result["detail"]:
                result["detail"] = self.sanitise(result["detail"])
        updated = record.copy()
        updated["verifiers"] = [graded.get(v["name"], v) for v in record["verifiers"]]
        known = [v for v in updated["verifiers"] if v["passed"] is not None]
        updated["passed"] = all(v["passed"] for v in known)
        updated.pop("grading", None)
        return seal(updated)

    # -- a whole rollout, policy inside the world ------------------------------------------

    def run_rollout(self, task: RolloutTask) -> RolloutRecord:
        """Policy, tools and grading all in this worker, under the rollout's timer."""
        self.prepare(task)
        # one timer for policy, tools, verifiers and reward model
        with rollout_timer(self.loaded.spec.limits.timeout_s):
            trajectory = self._conversation(task)
            return self.finish(task, trajectory, self.config.model_uri or "")

    def converse(self, task: RolloutTask) -> Trajectory:
        """The policy's and the tools' part of a rollout (the agent loop under the rollout's
        timer, in the workdir its caller prepared): its trajectory, to be graded by `finish`
        (in another process: `rlenv.worker.isolate`). The workdir stays."""
        with rollout_timer(self.loaded.spec.limits.timeout_s):
            return self._conversation(task)

    def _conversation(self, task: RolloutTask) -> Trajectory:
        record = self.inputs[task.input_index]
        spec = self.loaded.spec
        messages = record.messages(spec.system_prompt, spec.prompt)
        try:
            if hasattr(self.policy, "trajectory"):
                replayed = self.policy.trajectory(record.id, task.rollout)
                if replayed is not None:
                    return Trajectory(messages=replayed)
                answered = self._answered(task, record.id)
                if answered is not None:
                    return Trajectory(messages=[dict(message) for message in messages] + [answered])
            try:  # a policy crash ends the loop as policy_error, its trajectory kept
                return run_sync(self._loop(task, messages))  # type: ignore[no-any-return]
            except PolicyCrash as exc:
                return Trajectory(messages=messages, status="policy_error", error=str(exc))
        except RolloutTimeout:
            return Trajectory(messages=messages, status="timeout")

    def _answered(self, task: RolloutTask, input_id: str) -> dict[str, Any] | None:
        """A replayed answer whose agent loop would be one turn that ends at once (no user,
        a reply within bounds, no usage to add up, no tool call): its assistant message, the
        trajectory built as `rollout_loop` builds it without its per-turn request. None: the
        loop runs."""
        answered = getattr(self.policy, "answered", None)
        if answered is None or self.loaded.spec.user is not None:
            return None
        if self.loaded.spec.limits.max_turns < 1:
            return None
        message: dict[str, Any] | None = answered(input_id, task.rollout)
        if message is None or reply_problem(message) is not None:
            return None
        return message

    def _loop(self, task: RolloutTask, messages: list[dict[str, Any]]) -> Any:
        """The agent loop, or with a simulated user the conversation loop."""
        spec = self.loaded.spec
        if spec.user is None or self.user is None:
            return rollout_loop(
                messages, spec.limits.max_turns, self._model_caller(task), self._tool_caller(task)
            )

        async def call_user(current: list[dict[str, Any]], user_turn: int) -> str | None:
            return self.user_reply(task, current, user_turn)

        return conversation_loop(
            messages,
            spec.user,
            spec.limits.max_turns,
            self._model_caller(task),
            self._tool_caller(task),
            call_user,
        )

    def user_reply(
        self, task: RolloutTask, messages: list[dict[str, Any]], user_turn: int
    ) -> str | None:
        """The simulated user's next message in a rollout (its workdir, a seed of its own per
        user turn): called by the conversation loop in this process, or, for a policy outside
        the world, once per user turn from the orchestrator (`rlenv.worker.protocol`)."""
        assert self.user is not None, "the spec has no user: block"
        set_phase("tool")
        record = self.inputs[task.input_index]
        seed = derive_seed(self.seed_of(task), "user", user_turn)
        workdir = self.workdir_of(task)
        context = ToolContext(
            seed,
            seed_everything(seed),
            record.id,
            task.rollout,
            workdir,
            user_turn,
            dict(self.services),
        )
        with contextlib.chdir(workdir):
            return self.user.reply(messages, record.data, user_turn, context)

    def _model_caller(self, task: RolloutTask) -> ModelCall:
        """The in-world policy, called synchronously in the rollout's workdir."""
        record = self.inputs[task.input_index]
        workdir = None if self.inert else self.workdir_of(task)
        request = request_maker(
            self.tools.schemas,
            json_copy(self._decoding),
            self.seed_of(task),
            record.id,
            task.rollout,
        )

        async def call_model(current: list[dict[str, Any]], turn: int) -> ModelReply:
            made = request(current, turn)
            with _inside(workdir):
                set_phase("policy")
                try:
                    return self.policy.complete_sync(made)  # type: ignore[no-any-return]
                except (ModelOutputError, RolloutTimeout, FixtureMiss, ToolCrash, PolicyCrash):
                    raise
                except BaseException as exc:  # SystemExit, KeyboardInterrupt too
                    raise PolicyCrash(self.sanitise(describe(exc)), env_frames(exc)) from None

        return call_model

    def _tool_caller(self, task: RolloutTask) -> ToolCall:
        """Tool calls numbered within their turn (the number seeds the tool)."""

        async def call_tool(call: dict[str, Any], turn: int, number: int) -> ToolOutcome:
            return self.call_tool(task, call, turn, number)

        return numbered_tool_calls(call_tool)


def _inside(workdir: Path | None) -> contextlib.AbstractContextManager[None]:
    """The workdir as the current directory for the block (none: the directory stays)."""
    return contextlib.chdir(workdir) if workdir is not None else contextlib.nullcontext()


def _discard(path: Path) -> None:
    """Remove whatever is at `path` (a directory tree, a file, a link: never followed)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


class WorldChecksFailed(Exception):
    """The env's in-world checks found problems when the world started (`problems`:
    `rlenv.env.problems_to_data`): the orchestrator reports them as `load_environment` would."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"the env's checks found {len(problems)} problem(s)")
        self.problems = problems
