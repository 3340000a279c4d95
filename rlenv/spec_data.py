"""The spec as plain data: what a frozen-world worker holds of it, without pydantic.

`rlenv.spec` validates a spec into pydantic models; pydantic and those model classes were
~6 MB of each worker's heap after a rollout (mallinfo2: 27.2 -> 21.8 MB with one tool), which
its template and every call's child share copy-on-write, counted in a run's peak once per
worker group. A worker needs the spec's values only,
so the orchestrator converts the validated `LoadedSpec` into `Record`s (`as_data`) before it
sends it, and a worker that loads the spec itself converts it the same way: one code path
reads the spec in the world. The behaviour worker code calls on spec objects (`When.applies`,
`Verifier.label`, ...) is written once, in the mixins below, which the pydantic models and the
records both inherit. Nothing here imports pydantic; of rlenv, only ground-floor helpers, in
the functions that need them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

Normalise = Literal["lower", "strip", "whitespace", "punctuation", "articles"]
DEFAULT_NORMALISE: tuple[Normalise, ...] = ("lower", "strip", "whitespace")
Marker = Literal["boxed", "####", "answer"]
DEFAULT_MARKERS: tuple[Marker, ...] = ("boxed", "####", "answer")
USER_CASSETTE = "user"  # the name a simulated user's recorded HTTP is kept under, beside tools'
SERVICE_DOMAIN = "rlenv.internal"
"""Logical hosts of the spec's services: `http://NAME.rlenv.internal`, never a real port."""


# How rlenv calls each kind of python callable a spec names: the one statement of it, used by
# the JSON Schema (`rlenv schema`), the signature checks (`rlenv.env.check_signatures`) and the
# README's table (a test keeps the three equal): kind -> (call, returns).
CALLABLES: dict[str, tuple[str, str]] = {
    "tool": ("tool(arguments: dict, ctx)", "str | JSON value"),
    "verifier": (
        "check(answer: str | None, input: dict, ctx, **options)",
        "bool | float | (bool, detail) | {passed, score?, detail?}",
    ),
    "reward_model": ("score(prompt: list[message], answer: str | None, ctx, **options)", "float"),
    "policy": ("policy(messages: list[message], tools: list[tool schema], ctx)", "str | message"),
    "reward_component": ("fn(prompt: list[message], answer: str | None, ctx)", "float"),
    "user": ("user(messages: list[message], input: dict, ctx)", "str | None"),
}


def signature(kind: str) -> str:
    """``def CALL -> RETURNS`` for a kind of callable (:data:`CALLABLES`)."""
    call, returns = CALLABLES[kind]
    return f"def {call} -> {returns}"


# -- behaviour, written once for the pydantic models and their records -----------------------


class WhenRules:
    """`When` (a verifier's condition on the input)."""

    __slots__ = ()
    if TYPE_CHECKING:  # the fields the rules read (no annotations: pydantic would take them)
        field: str
        equals: Any
        in_: list[Any] | None
        model_fields_set: Any

    def applies(self, data: dict[str, Any]) -> bool:
        if self.field not in data or data[self.field] is None:
            return False
        if self.in_ is not None:
            return data[self.field] in self.in_
        if "equals" in self.model_fields_set:
            return bool(data[self.field] == self.equals)
        return True


class VerifierRules:
    __slots__ = ()
    if TYPE_CHECKING:  # the fields the rules read (no annotations: pydantic would take them)
        name: str | None
        type: str

    @property
    def label(self) -> str:
        return self.name or self.type


class JudgeRules:
    __slots__ = ()
    if TYPE_CHECKING:  # the fields the rules read (no annotations: pydantic would take them)
        cassette: Any

    @property
    def cassette_path(self) -> str:
        """The cassette's path as written in the spec ("" in live mode without one)."""
        return self.cassette.path if self.cassette is not None else ""


class ServiceRules:
    __slots__ = ()
    if TYPE_CHECKING:  # the fields the rules read (no annotations: pydantic would take them)
        name: str

    @property
    def host(self) -> str:
        return f"{self.name}.{SERVICE_DOMAIN}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}"

    @property
    def variable(self) -> str:
        """The environment variable a tool may read the base URL from: RLENV_<NAME>_URL."""
        return f"RLENV_{self.name.upper().replace('-', '_')}_URL"


class LoadedRules:
    """`LoadedSpec`'s paths: where the spec's files are, relative to the spec file."""

    __slots__ = ()
    if TYPE_CHECKING:  # the fields the rules read (no annotations: pydantic would take them)
        spec: Any
        path: Path
        root: Path
        raw: Any

    def resolve(self, relative: str) -> Path:
        return (self.root / relative).resolve()

    @property
    def inputs_path(self) -> Path:
        return self.source_path(self.spec.inputs)

    @property
    def train_inputs_path(self) -> Path | None:
        train = self.spec.train_inputs
        return None if train is None else self.source_path(train)

    def source_path(self, inputs: Any) -> Path:
        """The file inputs are read from: the spec's file, or a datasets split's rows as
        written to the cache under their pinned hash (`rlenv.inputs.materialise` writes it)."""
        if inputs.path is not None:
            return self.resolve(inputs.path)
        from rlenv.canonical import sha256_json
        from rlenv.files import default_cache_dir

        assert inputs.dataset is not None
        source = sha256_json(dict(inputs.dataset))[:16]  # its fields are text or None
        return default_cache_dir() / "datasets" / f"{source}-{inputs.sha256}.jsonl"

    @property
    def snapshot_path(self) -> Path | None:
        return self.resolve(self.spec.snapshot.path) if self.spec.snapshot else None

    def python_paths(self) -> list[Path]:
        return [self.resolve(entry) for entry in self.spec.python_path]

    def cassette_path(self, tool: Any) -> Path | None:
        return self.resolve(tool.cassette.path) if tool.cassette else None


# -- the records ----------------------------------------------------------------------------


class Record:
    """A spec model's fields as read-only attributes (``kind``: the model's class name), with
    the fields the user set (``model_fields_set``, which some rules read). Iterating gives
    (name, value) pairs, as a pydantic model does (``dict(record)``). Pickled by reference to
    this module."""

    # the fields live in the instance's own __dict__: read as plain attributes (~30 ns, as a
    # pydantic model's), where a `__getattr__` over a dict took ~450 ns for every field read
    __slots__ = ("kind", "model_fields_set", "__dict__")
    kind: str
    model_fields_set: frozenset[str]

    def __init__(self, kind: str, values: dict[str, Any], fields_set: frozenset[str]) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "model_fields_set", fields_set)
        self.__dict__.update(values)

    @property
    def values(self) -> dict[str, Any]:
        """The fields by name (the record's own: not to be changed)."""
        return self.__dict__

    def __getattr__(self, name: str) -> Any:  # only for what is not a field
        raise AttributeError(f"{self.kind!r} record has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self.kind} is frozen")

    def __iter__(self) -> Any:
        return iter(self.values.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.kind == other.kind and self.values == other.values

    def __hash__(self) -> int:
        return hash((self.kind, *self.values.values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.values.items())
        return f"{self.kind}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind, dict(self.values), self.model_fields_set))

    def model_dump(self) -> dict[str, Any]:
        """The fields as plain data, records in them too (pydantic's ``model_dump()``)."""
        return {name: _dumped(value) for name, value in self.values.items()}


def _dumped(value: Any) -> Any:
    if isinstance(value, Record):
        return value.model_dump()
    if type(value) in (list, tuple):
        return type(value)(_dumped(item) for item in value)
    if type(value) is dict:
        return {key: _dumped(item) for key, item in value.items()}
    return value


class WhenRecord(Record, WhenRules):
    __slots__ = ()


class VerifierRecord(Record, VerifierRules):
    """A verifier's fields; an expensive one's also its config as pydantic dumps it by alias
    (``dumped``: the grader cache's key holds it, `rlenv.grade_cache.verifier_identity`)."""

    __slots__ = ("dumped",)
    dumped: dict[str, Any] | None

    def __init__(
        self,
        kind: str,
        values: dict[str, Any],
        fields_set: frozenset[str],
        dumped: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(kind, values, fields_set)
        object.__setattr__(self, "dumped", dumped)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind, dict(self.values), self.model_fields_set, self.dumped))


class JudgeRecord(Record, JudgeRules):
    __slots__ = ()


class ServiceRecord(Record, ServiceRules):
    __slots__ = ()


RECORDS: dict[str, type[Record]] = {
    "When": WhenRecord,
    "Verifier": VerifierRecord,
    "Judge": JudgeRecord,
    "Service": ServiceRecord,
}
"""The record class of each spec model with behaviour (by class name); others are `Record`s."""


class LoadedData(LoadedRules):
    """A `LoadedSpec` as data: the spec's records, where it came from, its raw mapping."""

    __slots__ = ("spec", "path", "root", "raw")

    def __init__(self, spec: Any, path: Path, raw: dict[str, Any]) -> None:
        self.spec = spec
        self.path = path
        self.root = path.parent
        self.raw = raw

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.spec, self.path, self.raw))


def as_data(value: Any) -> Any:
    """`value` with every spec model in it (a `LoadedSpec` too) made a record, recursively;
    what is data already comes back as it is. A model is told by its class's ``model_fields``
    (pydantic's), so nothing of pydantic is imported here."""
    if isinstance(value, Record | LoadedData):
        return value
    if isinstance(value, LoadedRules):  # the pydantic side's `LoadedSpec`
        return LoadedData(as_data(value.spec), value.path, value.raw)
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict) and hasattr(value, "model_fields_set"):
        kind = type(value).__name__
        values = {name: as_data(getattr(value, name)) for name in fields}
        made = frozenset(value.model_fields_set)
        if kind == "Verifier":
            dumped = None
            if value.cost == "expensive":  # as `verifier_identity` dumps it
                dumped = json.loads(value.model_dump_json(by_alias=True))
            return VerifierRecord(kind, values, made, dumped)
        return RECORDS.get(kind, Record)(kind, values, made)
    if isinstance(value, datetime) and value.tzinfo is not None:
        # pydantic's zone (`pydantic_core.TzInfo`) as the standard library's, its offset and
        # name kept: unpickling the former imports pydantic_core (~1.5 MB of heap)
        zone = timezone(value.utcoffset() or timedelta(0), value.tzname() or "UTC")
        return value.replace(tzinfo=zone) if type(value.tzinfo) is not timezone else value
    if type(value) is list:
        return [as_data(item) for item in value]
    if type(value) is tuple:
        return tuple(as_data(item) for item in value)
    if type(value) is dict:
        return {key: as_data(item) for key, item in value.items()}
    return value


def line_of(loaded: LoadedRules, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of a field path (``("tools", 0, "function")``) in a loaded spec file."""
    import yaml

    from rlenv.user_yaml import line_at

    try:
        node = yaml.compose(loaded.path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return line_at(node, loc)
