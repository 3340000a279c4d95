"""A spec path in, a fully checked environment out: the ordered checks every command shares.

Like Gymnasium's ``check_env``: `load_environment` loads the spec (schema and YAML in
`rlenv.spec`) and then runs an ordered list of small, named checks on it, each raising a
SpecError or UserError that names the file, the line and the field where it can. `validate`,
`run`, `record`, `grade` and `rm probe` all come through here; `CHECKS` says which checks apply
to which purpose (recording skips the cassettes it is about to write, the probe calls no tool).

The env fingerprint (canonical spec + the hash of every referenced file and module) is
computed here too, from the hashes the file checks collect.
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from rlenv.canonical import (
    canonical_bytes,
    manifest_hash,
    sha256_bytes,
    sha256_file,
    unsafe_entries,
)
from rlenv.errors import Problems, SpecError, UserError
from rlenv.extras import check_extras
from rlenv.files import atomic_write, sys_path
from rlenv.inputs import InputRecord, check_templates, dataset_rows, load_inputs
from rlenv.seeding import derive_seed, seed_everything
from rlenv.spec import LoadedSpec, line_of, load_spec, signature

Purpose = Literal["validate", "run", "record", "grade", "probe"]
PURPOSES: tuple[Purpose, ...] = ("validate", "run", "record", "grade", "probe")


@dataclass
class Environment:
    """A spec that passed every check that can be made before any policy call."""

    loaded: LoadedSpec
    purpose: Purpose = "validate"
    model: str | None = None
    defer_expensive: bool = False
    file_hashes: dict[str, str] = field(default_factory=dict)
    inputs: list[InputRecord] = field(default_factory=list)
    reward_endpoints: list[tuple[str, int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fingerprint: str = ""
    calibration: dict[str, Any] | None = None
    """The reward model's human-scale calibration (calibration.json beside it), if any."""

    def where(self, *loc: str | int) -> str:
        """``spec.yaml:LINE`` of a field path (the spec file alone when the line is unknown)."""
        line = line_of(self.loaded, loc) if loc else None
        return f"{self.loaded.path}:{line}" if line else str(self.loaded.path)


@contextmanager
def _located(env: Environment, *loc: str | int) -> Iterator[None]:
    """Give a UserError raised without a location the spec line of the field it is about."""
    try:
        yield
    except UserError as exc:
        if exc.where is not None:
            raise
        raise type(exc)(str(exc), where=env.where(*loc)) from None


# ---------------------------------------------------------------------------------------------
# The checks, in the order they run. Each takes the environment being built, may add to it
# (hashes, inputs, warnings) and raises on the first problem.


def _pinned_file(
    path: Path,
    pinned: str | None,
    field: str,
    *,
    where: str,
    where_hash: str,
    missing: str = "file",
) -> str:
    """The sha256 of a file the spec references; refuse it when missing or not as pinned."""
    if not path.is_file():
        raise SpecError(f"{field}.path: {missing} not found: {path}", where=where)
    actual = sha256_file(path)
    if pinned and actual != pinned:
        raise SpecError(
            f"{field}.sha256: hash mismatch for {path.name}: pinned {pinned[:12]}…,"
            f" file has {actual}",
            where=where_hash,
        )
    return actual


def check_inputs_file(env: Environment) -> None:
    """The held-out inputs file exists and matches its pinned sha256."""
    env.file_hashes["inputs"] = _pinned_inputs(env, "inputs")


def _pinned_inputs(env: Environment, field: str) -> str:
    """The pinned hash of inputs or train_inputs, checked: a file as it is, a datasets split by
    its rows, written once to the cache (under that hash) where workers read them."""
    source = getattr(env.loaded.spec, field)
    path = env.loaded.source_path(source)
    if source.dataset is None:
        where = env.where(field, "path")
        return _pinned_file(path, source.sha256, field, where=where, where_hash=where)
    if path.is_file() and sha256_file(path) == source.sha256:
        return str(source.sha256)
    where = env.where(field, "dataset")
    try:
        rows = dataset_rows(source.dataset, env.loaded.root)
    except SpecError as exc:
        raise SpecError(f"{field}.{exc.message}", where=where) from None
    actual = sha256_bytes(rows)
    if actual != source.sha256:
        raise SpecError(
            f"{field}.sha256: hash mismatch for the dataset's rows: pinned"
            f" {source.sha256[:12]}…, rows have {actual}",
            where=env.where(field, "sha256"),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, rows)
    return actual


def check_snapshot(env: Environment) -> None:
    """The world snapshot directory, if any, exists and matches its pinned manifest hash."""
    spec, snapshot = env.loaded.spec, env.loaded.snapshot_path
    if spec.snapshot is None or snapshot is None:
        return
    if not snapshot.is_dir():
        raise SpecError(
            f"snapshot.path: directory not found: {snapshot}", where=env.where("snapshot", "path")
        )
    unsafe = unsafe_entries(snapshot)  # links leading outside, FIFOs, sockets, devices
    if unsafe:
        where = env.where("snapshot", "path")
        raise Problems([SpecError(f"snapshot.path: {entry}", where=where) for entry in unsafe])
    actual = manifest_hash(snapshot)
    if actual != spec.snapshot.sha256:
        raise SpecError(
            f"snapshot.sha256: manifest hash mismatch for {snapshot.name}: pinned"
            f" {spec.snapshot.sha256[:12]}…, directory has {actual}",
            where=env.where("snapshot", "sha256"),
        )
    env.file_hashes["snapshot"] = actual


def check_cassette_files(env: Environment) -> None:
    """Every tool cassette and judge cassette exists and matches its pinned sha256 (not when
    recording them)."""
    from rlenv.verifiers.judge import load_cassette

    loaded = env.loaded
    problems: list[UserError] = []
    for index, tool in enumerate(loaded.spec.tools):
        cassette = loaded.cassette_path(tool)
        if cassette is None or tool.cassette is None:
            continue
        try:
            env.file_hashes[f"tools.{tool.name}.cassette"] = _pinned_file(
                cassette,
                tool.cassette.sha256,
                f"tools[{index}].cassette",
                where=env.where("tools", index, "cassette", "path"),
                where_hash=env.where("tools", index, "cassette", "sha256"),
                missing="cassette",
            )
        except UserError as exc:
            problems.append(exc)
    for index, verifier in enumerate(loaded.spec.verifiers):
        if verifier.judge is None or verifier.judge.cassette is None:
            continue
        if verifier.judge.mode != "replay":  # it grows as answers are judged: not pinned
            try:
                load_cassette(loaded.resolve(verifier.judge.cassette.path))  # if there, readable
            except UserError as exc:
                problems.append(exc)
            continue
        try:
            env.file_hashes[f"verifiers.{verifier.label}.cassette"] = _pinned_file(
                loaded.resolve(verifier.judge.cassette.path),
                verifier.judge.cassette.sha256,
                f"verifiers[{index}].judge.cassette",
                where=env.where("verifiers", index, "judge", "cassette", "path"),
                where_hash=env.where("verifiers", index, "judge", "cassette", "sha256"),
                missing="judge cassette (record it with `rlenv record`)",
            )
            load_cassette(loaded.resolve(verifier.judge.cassette.path))  # now, not after the run
        except UserError as exc:
            problems.append(exc)
    if problems:
        raise Problems(problems)


def check_reward_model_files(env: Environment) -> None:
    """The reward model's files and its pinned training data exist (and match their hashes)."""
    loaded = env.loaded
    reward = loaded.spec.reward_model
    if reward is not None and reward.uri is not None:
        from rlenv.rm.calibration import calibration_for
        from rlenv.rm.score import reward_model_files

        env.file_hashes.update(reward_model_files(reward.uri, loaded.root))
        with _located(env, "reward_model", "uri"):
            env.calibration = calibration_for(reward.uri, loaded.root)
    for name in ("train_data", "training_prompts", "training_pairs"):
        ref = getattr(reward, name, None)
        if ref is None:
            continue
        env.file_hashes[f"reward_model.{name}"] = _pinned_file(
            loaded.resolve(ref.path),
            ref.sha256,
            f"reward_model.{name}",
            where=env.where("reward_model", name, "path"),
            where_hash=env.where("reward_model", name, "sha256"),
        )


def check_train_inputs(env: Environment) -> None:
    """The training inputs (if any) parse, match their hash and share no prompt with the
    held-out inputs (exact or near, by the leakage check's n-gram containment)."""
    from rlenv.inputs import render
    from rlenv.rm.leakage import train_overlap

    spec = env.loaded.spec
    if spec.train_inputs is None:
        return
    where = env.where("train_inputs")
    env.file_hashes["train_inputs"] = _pinned_inputs(env, "train_inputs")
    train = load_inputs(
        env.loaded.source_path(spec.train_inputs), templated=spec.prompt is not None
    )

    def shown(records: list[InputRecord]) -> list[dict[str, Any]]:
        if spec.prompt is None:
            return [record.data for record in records]
        return [
            {**record.data, "prompt": render(spec.prompt.template, record.data)}
            for record in records
        ]

    check = train_overlap(shown(env.inputs), shown(train))
    if check.overlaps:
        ids = check.left_ids
        listed = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        raise SpecError(
            f"train_inputs: {len(ids)} held-out input(s) also appear in the training inputs:"
            f" {listed}; training on held-out prompts makes the verdict meaningless",
            where=where,
        )


def check_inputs(env: Environment) -> None:
    """Every input record parses, has a unique id and a prompt or messages (or renders with
    the spec's prompt template)."""
    spec = env.loaded.spec
    env.inputs = load_inputs(env.loaded.inputs_path, templated=spec.prompt is not None)
    check_templates(env.inputs, spec.prompt, env.where("prompt", "template"))


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
    from rlenv.providers.base import import_ref
    from rlenv.rewards import build_reward_model
    from rlenv.verifiers import build_verifiers

    loaded = env.loaded
    spec = loaded.spec
    with sys_path(loaded.python_paths()):
        for index, tool in enumerate(spec.tools):
            with _located(env, "tools", index, "function"):
                function = import_ref(tool.function, what=f"tools[{index}].function")
            if not callable(function):
                raise UserError(
                    f"tools[{index}].function: {tool.function} is not callable",
                    where=env.where("tools", index, "function"),
                )
        with _located(env, "verifiers"):
            build_verifiers(list(spec.verifiers))
        with _located(env, "reward_model"):
            build_reward_model(spec.reward_model, loaded.root)


def check_policy_importable(env: Environment) -> None:
    """The policy the run will call has a known scheme, and a python: one imports and is
    callable (the spec's `model`, or `--model`: a worker must not be the first to find out)."""
    from rlenv.providers.base import import_ref
    from rlenv.providers.registry import scheme_of

    uri = env.model or env.loaded.spec.model
    if not uri:
        return
    from_spec = not env.model
    where = env.where("model") if from_spec else "--model"
    try:
        scheme, ref = scheme_of(uri)
    except UserError as exc:
        raise UserError(exc.message, where=where) from None
    if scheme.name != "python":
        return
    if ":" not in ref:
        raise UserError(f"bad model URI {uri!r}: expected python:pkg.module:function", where=where)
    with sys_path(env.loaded.python_paths()):
        try:
            policy = import_ref(ref, what=f"model {uri}")
        except UserError as exc:
            raise UserError(exc.message, where=where) from None
    if not callable(policy):
        raise UserError(f"model {uri}: {ref} is not callable", where=where)


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
    from rlenv.providers.base import import_ref

    spec = env.loaded.spec
    Loc = tuple[str | int, ...]
    checks: list[tuple[Loc, str, str, tuple[str, ...], dict[str, Any], str]] = []
    for index, tool in enumerate(spec.tools):
        name = f"tools[{index}].function"
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


def check_cassette_secrets(env: Environment) -> None:
    """A committed cassette must not carry a credential (not when recording: it scrubs)."""
    from rlenv.world.replay import load_index
    from rlenv.world.scrub import spec_scrubber
    from rlenv.world.secrets import unallowed

    loaded = env.loaded
    allow = loaded.spec.scrub.allow if loaded.spec.scrub else []
    problems: list[UserError] = []
    for index, tool in enumerate(loaded.spec.tools):
        cassette = loaded.cassette_path(tool)
        if cassette is None:
            continue
        _, found = load_index(cassette, spec_scrubber(loaded))
        found = unallowed(found, cassette.name, allow)  # findings the spec allow-lists pass
        problems += [
            UserError(
                f"tools[{index}].cassette: {cassette.name} holds a secret-looking value:"
                f" {finding}; re-record with `rlenv record` (it scrubs) or scrub the file",
                where=env.where("tools", index, "cassette", "path"),
            )
            for finding in found
        ]
    if problems:
        raise Problems(problems)


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
    """
    import numpy

    input_id = env.inputs[0].id if env.inputs else "0"
    first = derive_seed(env.loaded.spec.seed, input_id, 0)
    second = derive_seed(env.loaded.spec.seed, input_id, 1)
    saved = random.getstate(), numpy.random.get_state()
    try:
        draws = [_draws(first), _draws(second), _draws(first)]
    finally:
        random.setstate(saved[0])
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


def _draws(seed: int) -> tuple[float, float]:
    """Seed every RNG with `seed` (as a rollout does) and draw once from Python's and NumPy's."""
    import numpy

    seed_everything(seed)
    return random.random(), float(numpy.random.random())


@dataclass(frozen=True)
class Check:
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

CHECKS: tuple[Check, ...] = (
    Check("extras", check_extras, ALL),
    Check("inputs_file", check_inputs_file, ALL),
    Check("snapshot", check_snapshot, ALL),
    Check("cassette_files", check_cassette_files, WITH_CASSETTES),
    Check("reward_model_files", check_reward_model_files, ALL),
    Check("inputs", check_inputs, ALL, needs=("inputs_file",)),
    Check("verifiers_apply", check_verifiers_apply, ALL, needs=("inputs",)),
    Check("gold", check_gold, ALL, needs=("inputs",)),
    Check("train_inputs", check_train_inputs, ALL, needs=("inputs",)),
    Check("importable", check_importable, ALL, in_world=True),
    Check("policy_importable", check_policy_importable, WITH_POLICY, in_world=True),
    Check("signatures", check_signatures, ALL, needs=("importable",), in_world=True),
    Check("cassette_secrets", check_cassette_secrets, WITH_CASSETTES, needs=("cassette_files",)),
    Check("leakage", check_leakage, ALL, needs=("inputs", "reward_model_files", "importable")),
    Check("deferrable", check_deferrable, frozenset({"run", "record"}), needs=("importable",)),
    Check("reward_endpoints", check_reward_endpoints, ALL),
    Check("system_packages", check_system_packages, frozenset({"validate", "record"})),
    Check("seeds_matter", check_seeds_matter, ALL, needs=("inputs",)),
)


def checks_for(purpose: Purpose) -> list[Check]:
    """The checks `load_environment` runs for a purpose, in order."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; expected one of {', '.join(PURPOSES)}")
    return [check for check in CHECKS if purpose in check.purposes]


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

    The checks that import the env's python modules (`Check.in_world`) run, by
    `world_checks`, in a child process with the frozen world's environment variables and
    socket filter ("child": module-level env code never runs in this process, which holds
    the API keys and the network), or are left to the run's workers, which import the
    modules anyway and report the same problems when they start ("workers": `rlenv run`),
    or run in this process ("here": the child itself, and a worker).
    """
    try:
        loaded = load_spec(spec_path)
    except Problems as exc:
        raise _reported(exc.problems, purpose) from None
    env = Environment(loaded, purpose, model, defer_expensive)
    checks = checks_for(purpose)
    child: _WorldChild | None = None
    if world_checks == "child" and any(check.in_world for check in checks):
        child = _WorldChild(loaded.path, purpose, model, defer_expensive)  # beside the others
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
    env: Environment, checks: list[Check], world_checks: WorldChecks, child: _WorldChild | None
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


def _problems_of(check: Check, env: Environment) -> list[UserError]:
    try:
        check.function(env)
    except Problems as exc:
        return list(exc.problems)
    except UserError as exc:
        return [exc]
    return []


def _flat(found: dict[str, list[UserError] | None]) -> list[UserError]:
    return [problem for problems in found.values() if problems for problem in problems]


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


def problems_to_data(problems: list[UserError]) -> list[dict[str, Any]]:
    """Problems as plain data, to cross a process boundary (an exception's pickle is code)."""
    flat: list[UserError] = []
    for problem in problems:
        flat.extend(problem.problems if isinstance(problem, Problems) else [problem])
    return [
        {"spec": isinstance(p, SpecError), "message": p.message, "where": p.where} for p in flat
    ]


def problems_from_data(data: Any) -> list[UserError]:
    """The problems `problems_to_data` described (what is not one is left out)."""
    problems: list[UserError] = []
    for item in data if isinstance(data, list) else []:
        if isinstance(item, dict) and isinstance(item.get("message"), str):
            where = item.get("where")
            kind = SpecError if item.get("spec") else UserError
            problems.append(kind(item["message"], where=where if isinstance(where, str) else None))
    return problems


def reported_problems(data: Any, purpose: Purpose) -> UserError:
    """The error a worker's start found (`problems_to_data`), as `load_environment` says it."""
    problems = problems_from_data(data) or [UserError("the env's checks failed, saying nothing")]
    return _reported(problems, purpose)


class _WorldChild:
    """The in-world checks of one `load_environment`, running in a child interpreter started
    with the frozen world's environment variables (`world_environment`: no API key), which
    installs the world's socket filter before it imports any env module. Its answer comes back
    as JSON on a pipe of its own; what env code prints goes to stderr."""

    def __init__(
        self, spec: Path, purpose: Purpose, model: str | None, defer_expensive: bool
    ) -> None:
        from rlenv.world.environment import world_environment

        self.read, write = os.pipe()
        request = {
            "spec": str(spec),
            "purpose": purpose,
            "model": model,
            "defer_expensive": defer_expensive,
            "answer_fd": write,
        }
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from rlenv.env import _world_child; _world_child()"],
                stdin=subprocess.PIPE,
                stdout=2,  # what env code prints at import: stderr, never the JSON on stdout
                env=world_environment(),
                pass_fds=(write,),
            )
        finally:
            os.close(write)
        assert self.process.stdin is not None
        with self.process.stdin:
            self.process.stdin.write(json.dumps(request).encode())
        self.found: dict[str, list[UserError]] | None = None
        self.where = str(spec)

    def problems(self, name: str) -> list[UserError]:
        """The problems the child's check `name` found (waits for the child once)."""
        if self.found is None:
            self.found = self._wait()
        return self.found.get(name, [])

    def _wait(self) -> dict[str, list[UserError]]:
        with os.fdopen(self.read, "rb") as answer:
            self.read = -1
            data = answer.read()
        code = self.process.wait()
        try:
            found = json.loads(data)
            checks = found["checks"]
        except (ValueError, TypeError, KeyError):
            raise UserError(
                "importing the env's python modules ended the process that checks them (exit"
                f" code {code}) before the checks finished: module-level code must not exit",
                where=self.where,
            ) from None
        if found.get("error"):
            raise UserError(
                f"checking the env's modules failed: {found['error']}", where=self.where
            )
        return {name: problems_from_data(items) for name, items in checks.items()}

    def close(self) -> None:
        if self.read >= 0:
            os.close(self.read)
            self.read = -1
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _world_child() -> None:
    """The checking child's body (`_WorldChild`): read the request on stdin, enter the world's
    socket filter, run the in-world checks, write {"checks": {name: [problem, ...]}}."""
    request = json.loads(sys.stdin.buffer.read())
    answer_fd = int(request["answer_fd"])
    os.set_inheritable(answer_fd, False)  # nothing env code starts gets the answer pipe
    from rlenv.world import sockets

    sockets.install(whole_process=True)
    checks: dict[str, list[dict[str, Any]]] = {}
    error = None
    try:
        results = _world_results(
            load_spec(request["spec"]),
            request["purpose"],
            request["model"],
            request["defer_expensive"],
        )
        checks = {name: problems_to_data(found) for name, found in results.items() if found}
    except Exception as exc:  # not env code's (import_ref says that in one line): ours
        error = f"{type(exc).__name__}: {exc}"
    payload = json.dumps({"checks": checks, "error": error}).encode()
    with os.fdopen(answer_fd, "wb") as answer:
        answer.write(payload)


# ---------------------------------------------------------------------------------------------
# The fingerprint.


def python_sources(loaded: LoadedSpec) -> dict[str, str]:
    """sha256 of the source of every module the env names by import string (tools, verifiers,
    the reward model) and of the helpers they import under the spec's python paths.

    Found without executing the modules, so a changed tool or verifier changes the fingerprint.
    The default policy (`model:`) is not the env: its source is the model's identity
    (`policy_sources`), recorded in run.json beside the env fingerprint.
    """
    refs: list[str] = [tool.function for tool in loaded.spec.tools]
    refs += [verifier.function for verifier in loaded.spec.verifiers if verifier.function]
    if loaded.spec.reward_model and loaded.spec.reward_model.function:
        refs.append(loaded.spec.reward_model.function)
    return _module_sources(loaded, refs)


def policy_sources(loaded: LoadedSpec, model_uri: str) -> dict[str, str]:
    """sha256 of a ``python:`` policy's module and the helpers it imports under the spec's
    python paths (empty for any other scheme, or a policy installed outside the env)."""
    if not model_uri.startswith("python:"):
        return {}
    return _module_sources(loaded, [model_uri[len("python:") :]])


def _module_sources(loaded: LoadedSpec, refs: list[str]) -> dict[str, str]:
    """sha256 of each named module that lives beside the spec, plus its imported helpers."""
    sources: dict[str, str] = {}
    with sys_path(loaded.python_paths()):
        for ref in sorted(set(refs)):
            module = ref.split(":", 1)[0]
            origin = _module_origin(module)
            if origin is None:
                continue
            if origin.is_relative_to(loaded.root.parent) or origin.is_relative_to(loaded.root):
                sources[module] = sha256_file(origin)
                for name, path in _imported_helpers(module, origin, loaded.python_paths()):
                    sources.setdefault(name, sha256_file(path))
    return sources


def _module_origin(module: str) -> Path | None:
    """The file `import module` would load, found the way the import system finds it but
    without importing anything: `importlib.util.find_spec("pkg.mod")` imports ``pkg`` (runs
    its ``__init__``), and env code runs only in the frozen world."""
    from importlib.machinery import PathFinder

    found = None
    locations: list[str] | None = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        imported = sys.modules.get(name)
        try:
            if imported is not None:
                found = getattr(imported, "__spec__", None)
            else:
                found = PathFinder.find_spec(name, locations)
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        if depth < len(parts):
            if found.submodule_search_locations is None:
                return None
            locations = list(found.submodule_search_locations)
    if found is None or not found.origin or not Path(found.origin).is_file():
        return None
    return Path(found.origin)


def _imported_helpers(module: str, origin: Path, roots: list[Path]) -> Iterator[tuple[str, Path]]:
    """Every module under `roots` that `module` imports, transitively (read, never executed).

    Imports are found by walking each file's syntax tree (anywhere in it, so imports inside
    functions count too); a name is kept when it resolves to a .py file under one of the spec's
    python paths, with each enclosing package's __init__.py. Installed packages are not env code.
    """
    seen: set[str] = {module}
    queue: list[tuple[str, Path]] = [(module, origin)]
    while queue:
        name, path = queue.pop()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for candidate in _import_names(tree, package):
            parts = candidate.split(".")
            for depth in range(1, len(parts) + 1):
                dotted = ".".join(parts[:depth])
                if dotted in seen:
                    continue
                found = _module_file(dotted, roots)
                if found is None:
                    continue
                seen.add(dotted)
                queue.append((dotted, found))
                yield dotted, found


def _import_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Absolute names of what a module imports (`from a import b` yields a and a.b)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                up = node.level - 1
                if up > len(anchor):
                    continue
                anchor = anchor[: len(anchor) - up] if up else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if not base:
                continue
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _module_file(dotted: str, roots: list[Path]) -> Path | None:
    """The .py file of a dotted module name under one of `roots` (a package's __init__.py)."""
    relative = Path(*dotted.split("."))
    for root in roots:
        for path in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
            if path.is_file():
                return path
    return None


# Spec fields that name the policy, not the env: recorded in run.json as the model's identity.
POLICY_FIELDS = ("model", "reference")


def fingerprint(loaded: LoadedSpec, file_hashes: dict[str, str]) -> str:
    """sha256 over the canonical spec (without the policy fields) plus the hash of every
    referenced file and env module."""
    spec = {k: v for k, v in loaded.canonical().items() if k not in POLICY_FIELDS}
    for verifier in spec.get("verifiers") or []:  # a cassette that only grows: the same env
        judge = verifier.get("judge") if isinstance(verifier, dict) else None
        if isinstance(judge, dict) and judge.get("mode") in ("record_missing", "live"):
            judge.pop("cassette", None)
    payload = {
        "spec": spec,
        "files": file_hashes,
        "modules": python_sources(loaded),
    }
    return sha256_bytes(canonical_bytes(payload))


__all__ = [
    "CHECKS",
    "Check",
    "Environment",
    "checks_for",
    "fingerprint",
    "load_environment",
    "policy_sources",
    "python_sources",
]
