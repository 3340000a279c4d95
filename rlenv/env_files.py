"""The environment a spec becomes, and the checks of the files it references: the held-out
inputs, the snapshot, the cassettes (present, pinned, free of secrets), the reward model's files.
`rlenv.env` runs them, with the checks that import the env's code, in the order of its `ENV_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rlenv.canonical import manifest_hash, sha256_bytes, sha256_file, unsafe_entries
from rlenv.errors import Problems, SpecError, UserError
from rlenv.files import atomic_write
from rlenv.inputs import EnvInput, check_templates, dataset_rows, load_inputs
from rlenv.spec_data import line_of

if TYPE_CHECKING:  # a worker runs the in-world checks on records (`rlenv.spec_data`)
    from rlenv.spec import LoadedSpec

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
    inputs: list[EnvInput] = field(default_factory=list)
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
def located(env: Environment, *loc: str | int) -> Iterator[None]:
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


def _repin_hint(spec: Path | None) -> str:
    """What to run after changing a pinned file on purpose (the mismatch is otherwise the
    signal that it changed under the env)."""
    return f" (changed on purpose? `rlenv pin {spec}` pins it as it is now)" if spec else ""


def _pinned_file(
    path: Path,
    pinned: str | None,
    field: str,
    *,
    where: str,
    where_hash: str,
    missing: str = "file",
    spec: Path | None = None,
) -> str:
    """The sha256 of a file the spec references; refuse it when missing or not as pinned."""
    if not path.is_file():
        raise SpecError(f"{field}.path: {missing} not found: {path}", where=where)
    actual = sha256_file(path)
    if pinned and actual != pinned:
        raise SpecError(
            f"{field}.sha256: hash mismatch for {path.name}: pinned {pinned[:12]}…,"
            f" file has {actual}{_repin_hint(spec)}",
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
        return _pinned_file(
            path, source.sha256, field, where=where, where_hash=where, spec=env.loaded.path
        )
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
            f" {source.sha256[:12]}…, rows have {actual}{_repin_hint(env.loaded.path)}",
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
            f" {spec.snapshot.sha256[:12]}…, directory has {actual}"
            f"{_repin_hint(env.loaded.path)}",
            where=env.where("snapshot", "sha256"),
        )
    env.file_hashes["snapshot"] = actual


def check_cassette_files(env: Environment) -> None:
    """Every tool cassette and judge cassette exists and matches its pinned sha256 (not when
    recording them)."""
    from rlenv.verifiers.judge import load_cassette

    loaded = env.loaded
    problems: list[UserError] = []
    unrecorded = _unrecorded_cassettes(env)
    if unrecorded:  # a fresh env: one line saying so, and what to run (the rest is checked)
        names = ", ".join(f"{field} {path}" for field, path, _ in unrecorded)
        problems.append(
            SpecError(
                f"fixtures not recorded yet ({names}): record them with"
                f" `rlenv record {loaded.path}`, then validate again",
                where=unrecorded[0][2],
            )
        )
    skipped = {field for field, _, _ in unrecorded}
    for index, tool in enumerate(loaded.spec.tools):
        cassette = loaded.cassette_path(tool)
        if cassette is None or tool.cassette is None or f"tools[{index}].cassette" in skipped:
            continue
        try:
            env.file_hashes[f"tools.{tool.name}.cassette"] = _pinned_file(
                cassette,
                tool.cassette.sha256,
                f"tools[{index}].cassette",
                where=env.where("tools", index, "cassette", "path"),
                where_hash=env.where("tools", index, "cassette", "sha256"),
                missing="cassette",
                spec=loaded.path,
            )
        except UserError as exc:
            problems.append(exc)
    user = loaded.spec.user
    if user is not None and user.cassette is not None and "user.cassette" not in skipped:
        try:  # a model user's recorded replies
            env.file_hashes["user.cassette"] = _pinned_file(
                loaded.resolve(user.cassette.path),
                user.cassette.sha256,
                "user.cassette",
                where=env.where("user", "cassette", "path"),
                where_hash=env.where("user", "cassette", "sha256"),
                missing="cassette",
                spec=loaded.path,
            )
        except UserError as exc:
            problems.append(exc)
    for index, verifier in enumerate(loaded.spec.verifiers):
        if verifier.judge is None or verifier.judge.cassette is None:
            continue
        if f"verifiers[{index}].judge.cassette" in skipped:
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
                spec=loaded.path,
            )
            load_cassette(loaded.resolve(verifier.judge.cassette.path))  # now, not after the run
        except UserError as exc:
            problems.append(exc)
    if problems:
        raise Problems(problems)


def _unrecorded_cassettes(env: Environment) -> list[tuple[str, str, str]]:
    """The cassettes `rlenv record` has not written yet: not there and no hash pinned (a pinned
    one that is gone was recorded once: "not found" says that). (field, path as the spec
    names it, where)."""
    loaded = env.loaded
    named: list[tuple[str, Any, tuple[str | int, ...]]] = [
        (f"tools[{index}].cassette", tool.cassette, ("tools", index, "cassette", "path"))
        for index, tool in enumerate(loaded.spec.tools)
    ]
    if loaded.spec.user is not None:
        named.append(("user.cassette", loaded.spec.user.cassette, ("user", "cassette", "path")))
    for index, verifier in enumerate(loaded.spec.verifiers):
        judge = verifier.judge  # a record_missing/live judge starts with no cassette: it grows
        if judge is not None and judge.mode == "replay":
            judge_loc = ("verifiers", index, "judge", "cassette", "path")
            named.append((f"verifiers[{index}].judge.cassette", judge.cassette, judge_loc))
    found: list[tuple[str, str, str]] = []
    for field_name, cassette, loc in named:
        if cassette is None or cassette.sha256 or loaded.resolve(cassette.path).exists():
            continue
        found.append((field_name, cassette.path, env.where(*loc)))
    return found


def check_reward_model_files(env: Environment) -> None:
    """The reward model's files and its pinned training data exist (and match their hashes)."""
    loaded = env.loaded
    reward = loaded.spec.reward_model
    if reward is not None and reward.uri is not None:
        from rlenv.rm.calibration import calibration_for
        from rlenv.rm.score import reward_model_files

        env.file_hashes.update(reward_model_files(reward.uri, loaded.root))
        with located(env, "reward_model", "uri"):
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
            spec=loaded.path,
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
        env.loaded.source_path(spec.train_inputs),
        templated=spec.prompt is not None,
        rows=spec.train_inputs.dataset is not None,
    )

    def shown(records: list[EnvInput]) -> list[dict[str, Any]]:
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
    env.inputs = load_inputs(
        env.loaded.inputs_path,
        templated=spec.prompt is not None,
        rows=spec.inputs.dataset is not None,
    )
    check_templates(env.inputs, spec.prompt, env.where("prompt", "template"))


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
        if tool.mcp is not None:
            from rlenv.world.mcp import cassette_findings

            found = cassette_findings(cassette, spec_scrubber(loaded))
        else:
            # built (on a cold cache) by a child: vcrpy and its garbage stay out of here
            _, found = load_index(cassette, spec_scrubber(loaded), aside=True)
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
