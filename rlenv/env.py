"""A spec path in, a fully checked environment out: the ordered checks every command shares.

Like Gymnasium's ``check_env``: `load_environment` loads the spec (schema and YAML in
`rlenv.spec`) and then runs an ordered list of small, named checks on it, each raising a
SpecError or UserError that names the file, the line and the field where it can. `validate`,
`run`, `record`, `grade` and `rm probe` all come through here; `ENV_CHECKS` says which checks apply
to which purpose (recording skips the cassettes it is about to write, the probe calls no tool).

The env fingerprint (canonical spec + the hash of every referenced file and module,
`rlenv.fingerprint`) is computed from the hashes the file checks collect; the in-world checks
run in a child interpreter (`rlenv.checking_child`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from rlenv.checking_child import (
    CheckingChild,
    answer_checks,
    problems_from_data,
    problems_to_data,
)
from rlenv.env_files import (
    PURPOSES,
    Environment,
    Purpose,
    check_cassette_files,
    check_cassette_secrets,
    check_inputs,
    check_inputs_file,
    check_reward_model_files,
    check_snapshot,
    check_train_inputs,
    located,
)
from rlenv.errors import Problems, SpecError, UserError
from rlenv.extras import check_extras
from rlenv.files import sys_path
from rlenv.fingerprint import fingerprint, policy_sources, python_sources
from rlenv.seeding import derive_seed, seed_everything
from rlenv.spec_data import signature

if TYPE_CHECKING:  # a worker runs the in-world checks on records (`rlenv.spec_data`)
    from rlenv.spec import LoadedSpec


def check_verifiers_apply(env: Environment) -> None:
    """Every input has at least one verifier whose `when:` matches it (else it could only
    pass vacuously)."""
    verifiers = env.loaded.spec.verifiers
    if all(verifier.when is None for verifier in verifiers):
        return
    for record in env.inputs:
        if not any(v.when is None or v.when.applies(record.data) for v in verifiers):
            raise SpecError(
                f"input {record.id!r}: no verifier applies to it (every `when:` excludes it)",
                where=env.where("verifiers"),
            )


def check_gold(env: Environment) -> None:
    """Every input a verifier applies to has that verifier's gold value (its `expected_field`
    present, not null, and for numeric a number its rule reads): one line per verifier."""
    from rlenv.verifiers.base import gold_problem

    problems: list[UserError] = []
    for index, verifier in enumerate(env.loaded.spec.verifiers):
        found = [
            (record.id, problem)
            for record in env.inputs
            if verifier.when is None or verifier.when.applies(record.data)
            if (problem := gold_problem(verifier, record.data)) is not None
        ]
        if found:
            (first, problem), more = found[0], [input_id for input_id, _ in found[1:]]
            others = (
                f" (and {len(more)} more inputs: {', '.join(map(repr, more[:5]))}" if more else ""
            )
            others += ", ...)" if len(more) > 5 else (")" if more else "")
            problems.append(
                SpecError(
                    f"input {first!r}: {problem} (verifier {verifier.label!r}){others}",
                    where=env.where("verifiers", index, "expected_field"),
                )
            )
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise Problems(problems)


def check_importable(env: Environment) -> None:
    """Tools, verifiers and the reward model import (in a worker-like way, without freezing)."""
    from rlenv.refs import import_ref
    from rlenv.rewards import build_reward_model
    from rlenv.verifiers import build_verifiers

    loaded = env.loaded
    spec = loaded.spec
    with sys_path(loaded.python_paths()):
        for index, tool in enumerate(spec.tools):
            if tool.function is None:  # an MCP tool: replayed from its cassette
                continue
            with located(env, "tools", index, "function"):
                function = import_ref(tool.function, what=f"tools[{index}].function")
            if not callable(function):
                raise UserError(
                    f"tools[{index}].function: {tool.function} is not callable",
                    where=env.where("tools", index, "function"),
                )
        with located(env, "verifiers"):
            build_verifiers(list(spec.verifiers))
        with located(env, "reward_model"):
            build_reward_model(spec.reward_model, loaded.root)


def check_policy_importable(env: Environment) -> None:
    """The policy the run will call has a known scheme, and a python: one imports and is
    callable (the spec's `model`, or `--model`: a worker must not be the first to find out)."""
    from rlenv.providers.registry import scheme_of
    from rlenv.refs import import_ref

    uri = env.model or env.loaded.spec.model
    if not uri:
        return
    from_spec = not env.model

    def where() -> str:  # read from the spec file only for a problem (a worker reads no YAML)
        return env.where("model") if from_spec else "--model"

    try:
        scheme, ref = scheme_of(uri)
    except UserError as exc:
        raise UserError(exc.message, where=where()) from None
    if scheme.name != "python":
        return
    if ":" not in ref:
        raise UserError(
            f"bad model URI {uri!r}: expected python:pkg.module:function", where=where()
        )
    with sys_path(env.loaded.python_paths()):
        try:
            policy = import_ref(ref, what=f"model {uri}")
        except UserError as exc:
            raise UserError(exc.message, where=where()) from None
    if not callable(policy):
        raise UserError(f"model {uri}: {ref} is not callable", where=where())


# How rlenv calls each python callable of a spec (worker.py, verifiers/builtin.py, rewards.py,
# providers/python.py): (field, positional arguments, documented signature)
TOOL_CALL = ("arguments", "ctx")
TOOL_SIGNATURE = signature("tool")
VERIFIER_CALL = ("answer", "input", "ctx")
VERIFIER_SIGNATURE = signature("verifier")
REWARD_CALL = ("prompt", "answer", "ctx")
REWARD_SIGNATURE = signature("reward_model")
COMPONENT_SIGNATURE = signature("reward_component")
POLICY_CALL = ("messages", "tools", "ctx")
POLICY_SIGNATURE = signature("policy")


def _call_problem(function: object, positional: tuple[str, ...], options: dict) -> str | None:
    """Why `function(*positional, **options)` would raise TypeError before running its body:
    ``score(prompt, answer): too many positional arguments``; None when it binds, or when
    Python cannot tell (a builtin without a signature)."""
    import inspect

    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*positional, **options)
    except TypeError as exc:
        return f"{getattr(function, '__name__', 'it')}{signature}: {exc}"
    return None


def check_signatures(env: Environment) -> None:
    """Every python callable of the spec can be called the way rlenv calls it: tools,
    python verifiers, a python reward model and the spec's python policy (inspect.signature
    against the documented call, nothing is run)."""
    from rlenv.refs import import_ref

    spec = env.loaded.spec
    Loc = tuple[str | int, ...]
    checks: list[tuple[Loc, str, str, tuple[str, ...], dict[str, Any], str]] = []
    for index, tool in enumerate(spec.tools):
        name = f"tools[{index}].function"
        if tool.function is None:  # an MCP tool
            continue
        checks.append(
            (("tools", index, "function"), name, tool.function, TOOL_CALL, {}, TOOL_SIGNATURE)
        )
    for index, verifier in enumerate(spec.verifiers):
        if verifier.type == "python" and verifier.function:
            loc: Loc = ("verifiers", index, "function")
            name = f"verifiers[{index}].function"
            options = dict(verifier.options)
            checks.append(
                (loc, name, verifier.function, VERIFIER_CALL, options, VERIFIER_SIGNATURE)
            )
    if spec.user is not None and spec.user.function:
        user_call = ("messages", "input", "ctx")
        loc = ("user", "function")
        checks.append((loc, "user.function", spec.user.function, user_call, {}, signature("user")))
    reward = spec.reward_model
    if reward is not None and reward.function:
        loc = ("reward_model", "function")
        options = dict(reward.options)
        checks.append(
            (loc, "reward_model.function", reward.function, REWARD_CALL, options, REWARD_SIGNATURE)
        )
    for name, component in (spec.reward.components if spec.reward else {}).items():
        if component.function:
            loc = ("reward", "components", name, "function")
            checks.append(
                (
                    loc,
                    f"reward.components.{name}.function",
                    component.function,
                    REWARD_CALL,
                    {},
                    COMPONENT_SIGNATURE,
                )
            )
    uri = spec.model or ""
    if env.purpose in WITH_POLICY and not env.model and uri.startswith("python:"):
        ref = uri[len("python:") :]
        if ":" in ref:
            checks.append((("model",), "model", ref, POLICY_CALL, {}, POLICY_SIGNATURE))
    with sys_path(env.loaded.python_paths()):
        for loc, name, ref, positional, options, documented in checks:
            try:
                function = import_ref(ref, what=name)
            except UserError:  # not importable: the importable checks' to say
                continue
            problem = _call_problem(function, positional, options)
            if problem:
                called = ", ".join([*positional, *(f"{key}=..." for key in options)])
                raise UserError(
                    f"{name}: {ref} cannot be called as ({called}): {problem};"
                    f" expected {documented}",
                    where=env.where(*loc),
                )


def check_leakage(env: Environment) -> None:
    """The held-out inputs do not appear in the reward model's training data (or only warn)."""
    from rlenv.rm.leakage import enforce_leakage

    env.warnings.extend(enforce_leakage(env.loaded))


STATE_TYPES = ("file_state", "sqlite_state", "json_state")  # graded on the rollout's files


def check_deferrable(env: Environment) -> None:
    """With deferred expensive verifiers, none of them needs the rollout's files."""
    if not env.defer_expensive:
        return
    for index, verifier in enumerate(env.loaded.spec.verifiers):
        if verifier.cost == "expensive" and verifier.type in STATE_TYPES:
            raise UserError(
                f"verifiers[{index}]: a {verifier.type} verifier cannot be deferred (the rollout's"
                " files are gone by `rlenv grade`); run it inline or make it cheap",
                where=env.where("verifiers", index, "cost"),
            )


def check_system_packages(env: Environment) -> None:
    """The system packages `rlenv record` needs are installed: libfaketime for `services:`
    (they run under its frozen clock)."""
    from rlenv.sandbox.faketime import faketime_library

    if env.loaded.spec.services and faketime_library() is None:
        raise UserError(
            "services: libfaketime is not installed; `rlenv record` runs the services under"
            " its frozen clock (Debian/Ubuntu: apt-get install faketime, or"
            " scripts/system-deps.sh)",
            where=env.where("services"),
        )


def check_reward_endpoints(env: Environment) -> None:
    """An HTTP reward model names a host: it is let through the frozen world's network guard."""
    reward = env.loaded.spec.reward_model
    uri = getattr(reward, "uri", None) or ""
    if not uri.startswith(("http://", "https://")):
        return
    parts = urlsplit(uri)
    if not parts.hostname:
        raise SpecError(
            f"reward_model.uri: no host in {uri!r}", where=env.where("reward_model", "uri")
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    env.reward_endpoints = [(parts.hostname, port)]


def check_seeds_matter(env: Environment) -> None:
    """Two rollouts of an input get different RNG states; one rollout's seed gives the same.

    Gymnasium's ``check_reset_seed``: rollout seeds are derived from the env seed, the input id
    and the rollout index, and seeding Python's and NumPy's RNGs with them must be effective.
    NumPy's is checked when NumPy is loaded here, as `rlenv.seeding` seeds it only then: the
    check does not import it (a third of a second of every `validate` and `run`).
    """
    numpy = sys.modules.get("numpy")
    input_id = env.inputs[0].id if env.inputs else "0"
    first = derive_seed(env.loaded.spec.seed, input_id, 0)
    second = derive_seed(env.loaded.spec.seed, input_id, 1)
    saved = random.getstate(), numpy.random.get_state() if numpy is not None else None
    try:
        draws = [_draws(first), _draws(second), _draws(first)]
    finally:
        random.setstate(saved[0])
        if numpy is not None:
            numpy.random.set_state(saved[1])
    if draws[0] != draws[2]:
        raise UserError(
            f"seed: the same rollout seed gave different random draws ({draws[0]} vs {draws[2]});"
            " something reseeds or shares the RNGs",
            where=env.where("seed"),
        )
    if first == second or draws[0] == draws[1]:
        raise UserError(
            f"seed: rollouts 0 and 1 of input {input_id!r} got the same random state;"
            " K rollouts of an input would all be the same",
            where=env.where("seed"),
        )


def _draws(seed: int) -> tuple[float, float | None]:
    """Seed every RNG with `seed` (as a rollout does) and draw once from Python's and (when
    loaded) NumPy's."""
    numpy = sys.modules.get("numpy")
    seed_everything(seed)
    return random.random(), float(numpy.random.random()) if numpy is not None else None


@dataclass(frozen=True)
class EnvCheck:
    name: str
    function: Callable[[Environment], None]
    purposes: frozenset[Purpose]
    # checks whose failure makes this one meaningless: it is skipped, not reported twice
    needs: tuple[str, ...] = ()
    # it imports the env's python modules, whose module-level code must run where env code
    # runs: in the frozen world (no API key, no network), never in the orchestrator
    in_world: bool = False

    @property
    def description(self) -> str:
        return (self.function.__doc__ or "").strip().splitlines()[0]


# Which purposes run which check:
#   cassette_files, cassette_secrets  not record (it writes the cassettes) nor probe (no tool runs)
#   policy_importable                 validate, run, record: grading and the probe call no policy
#   deferrable                        run, record: the only ones that can defer verifiers
#   everything else                   every purpose
ALL: frozenset[Purpose] = frozenset(PURPOSES)
WITH_CASSETTES: frozenset[Purpose] = frozenset({"validate", "run", "grade"})
WITH_POLICY: frozenset[Purpose] = frozenset({"validate", "run", "record"})

ENV_CHECKS: tuple[EnvCheck, ...] = (
    EnvCheck("extras", check_extras, ALL),
    EnvCheck("inputs_file", check_inputs_file, ALL),
    EnvCheck("snapshot", check_snapshot, ALL),
    EnvCheck("cassette_files", check_cassette_files, WITH_CASSETTES),
    EnvCheck("reward_model_files", check_reward_model_files, ALL),
    EnvCheck("inputs", check_inputs, ALL, needs=("inputs_file",)),
    EnvCheck("verifiers_apply", check_verifiers_apply, ALL, needs=("inputs",)),
    EnvCheck("gold", check_gold, ALL, needs=("inputs",)),
    EnvCheck("train_inputs", check_train_inputs, ALL, needs=("inputs",)),
    EnvCheck("importable", check_importable, ALL, in_world=True),
    EnvCheck("policy_importable", check_policy_importable, WITH_POLICY, in_world=True),
    EnvCheck("signatures", check_signatures, ALL, needs=("importable",), in_world=True),
    EnvCheck("cassette_secrets", check_cassette_secrets, WITH_CASSETTES, needs=("cassette_files",)),
    EnvCheck("leakage", check_leakage, ALL, needs=("inputs", "reward_model_files", "importable")),
    EnvCheck("deferrable", check_deferrable, frozenset({"run", "record"}), needs=("importable",)),
    EnvCheck("reward_endpoints", check_reward_endpoints, ALL),
    EnvCheck("system_packages", check_system_packages, frozenset({"validate", "record"})),
    EnvCheck("seeds_matter", check_seeds_matter, ALL, needs=("inputs",)),
)


def checks_for(purpose: Purpose) -> list[EnvCheck]:
    """The checks `load_environment` runs for a purpose, in order."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; expected one of {', '.join(PURPOSES)}")
    return [check for check in ENV_CHECKS if purpose in check.purposes]


def _reported(problems: list[UserError], purpose: Purpose) -> UserError:
    """`validate` lists every problem (one line each); the other commands say the first in one
    line and how many more there are."""
    if len(problems) == 1:
        return problems[0]
    if purpose == "validate":
        return Problems(problems)
    first = problems[0]
    return type(first)(
        f"{first.message} (and {len(problems) - 1} more: `rlenv validate` lists them)",
        where=first.where,
    )


WorldChecks = Literal["child", "workers", "here"]


def load_environment(
    spec_path: str | Path,
    *,
    purpose: Purpose = "validate",
    model: str | None = None,
    defer_expensive: bool = False,
    world_checks: WorldChecks = "child",
) -> Environment:
    """Load the spec, run every check that applies to `purpose`, and fingerprint the env.

    `model` is the policy URI a run will call when it is not the spec's own `model`. Every
    check runs even after one fails (except those that `need` a failed one), so every problem
    is reported at once: one is raised as itself, several as `Problems`.

    The checks that import the env's python modules (`EnvCheck.in_world`) run, by
    `world_checks`, in a child process with the frozen world's environment variables and
    socket filter ("child": module-level env code never runs in this process, which holds
    the API keys and the network), or are left to the run's workers, which import the
    modules anyway and report the same problems when they start ("workers": `rlenv run`),
    or run in this process ("here": the child itself, and a worker).
    """
    from rlenv.spec import load_spec

    try:
        loaded = load_spec(spec_path)
    except Problems as exc:
        raise _reported(exc.problems, purpose) from None
    env = Environment(loaded, purpose, model, defer_expensive)
    checks = checks_for(purpose)
    child: CheckingChild | None = None
    if world_checks == "child" and any(check.in_world for check in checks):
        child = CheckingChild(loaded, purpose, model, defer_expensive)  # beside the others
    try:
        problems = _flat(_run_checks(env, checks, world_checks, child))
    finally:
        if child is not None:
            child.close()
    if problems:
        raise _reported(problems, purpose)
    env.fingerprint = fingerprint(env.loaded, env.file_hashes)
    return env


def _run_checks(
    env: Environment, checks: list[EnvCheck], world_checks: WorldChecks, child: CheckingChild | None
) -> dict[str, list[UserError] | None]:
    """Each check's problems, in order ([]: it passed; None: skipped, a check it needs did
    not pass); an in-world check's come from `child` (none when the workers make it)."""
    found: dict[str, list[UserError] | None] = {}
    for check in checks:
        if any(found.get(need, []) != [] for need in check.needs):
            found[check.name] = None
        elif check.in_world and world_checks != "here":
            found[check.name] = child.problems(check.name) if child is not None else []
        else:
            found[check.name] = _problems_of(check, env)
    return found


def _problems_of(check: EnvCheck, env: Environment) -> list[UserError]:
    try:
        check.function(env)
    except Problems as exc:
        return list(exc.problems)
    except UserError as exc:
        return [exc]
    return []


def _flat(found: dict[str, list[UserError] | None]) -> list[UserError]:
    return [problem for problems in found.values() if problems for problem in problems]


def reported_problems(data: Any, purpose: Purpose) -> UserError:
    """The error a worker's start found (`problems_to_data`), as `load_environment` says it."""
    problems = problems_from_data(data) or [UserError("the env's checks failed, saying nothing")]
    return _reported(problems, purpose)


def _world_results(
    loaded: LoadedSpec, purpose: Purpose, model: str | None, defer_expensive: bool = False
) -> dict[str, list[UserError] | None]:
    env = Environment(loaded, purpose, model, defer_expensive)
    return _run_checks(env, [c for c in checks_for(purpose) if c.in_world], "here", None)


def world_problems(
    loaded: LoadedSpec, purpose: Purpose, model: str | None, defer_expensive: bool = False
) -> list[UserError]:
    """What the in-world checks of `purpose` find, run in this process: a frozen-world worker
    calls it when it starts (`WorkerConfig.world_checks`); the checking child runs the same."""
    return _flat(_world_results(loaded, purpose, model, defer_expensive))


def _world_child() -> None:
    """The checking child's body (`rlenv.checking_child.answer_checks` with these checks)."""
    answer_checks(_world_results)


# re-exported: the names callers used before the fingerprint and the checking child moved out
__all__ = [
    "ENV_CHECKS",
    "PURPOSES",
    "EnvCheck",
    "Environment",
    "Purpose",
    "checks_for",
    "fingerprint",
    "load_environment",
    "policy_sources",
    "problems_from_data",
    "problems_to_data",
    "python_sources",
    "reported_problems",
    "world_problems",
]
