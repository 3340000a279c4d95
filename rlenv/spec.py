"""The env spec: YAML (safe loader) into pydantic models that forbid unknown keys.

Every error names the file, the line where it can, the field path and what was expected.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlenv.errors import SpecError

IMPORT_REF = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


Normalise = Literal["lower", "strip", "whitespace", "punctuation", "articles"]
DEFAULT_NORMALISE: tuple[Normalise, ...] = ("lower", "strip", "whitespace")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Decoding(Strict):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int = Field(512, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: list[str] = Field(default_factory=list)
    seed: int | None = None


class FileRef(Strict):
    path: str
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


class PinnedFile(Strict):
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Fallback(Strict):
    status: int = 200
    body: Any = None


class Tool(Strict):
    name: str = Field(pattern=r"^[A-Za-z_][\w-]*$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    function: str = Field(pattern=IMPORT_REF)
    cassette: FileRef | None = None
    on_miss: Literal["error"] | Fallback = "error"


class Verifier(Strict):
    type: Literal[
        "exact_match",
        "regex",
        "numeric",
        "contains",
        "json_schema",
        "python",
        "file_state",
        "python_tests",
        "program_cases",
    ]
    name: str | None = None
    # what to check against: a literal, or a field of the input record
    expected: Any = None
    expected_field: str | None = None
    aliases_field: str | None = None
    normalize: list[Normalise] = Field(default_factory=lambda: list(DEFAULT_NORMALISE))
    pattern: str | None = None
    flags: list[Literal["ignorecase", "multiline", "dotall"]] = Field(default_factory=list)
    fullmatch: bool = False
    tolerance: float = Field(1e-6, ge=0)
    relative_tolerance: float = Field(0.0, ge=0)
    all: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    function: str | None = Field(None, pattern=IMPORT_REF)
    path: str | None = None
    path_field: str | None = None
    sha256: str | None = None
    contains: str | None = None
    exists: bool | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    # expensive verifiers (a test suite, a benchmark) can be sampled, deferred and cached
    cost: Literal["cheap", "expensive"] = "cheap"
    version: str = "1"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _check_required(self) -> Verifier:
        needs = {
            "regex": ("pattern",),
            "python": ("function",),
            "json_schema": ("schema_",),
        }
        for field in needs.get(self.type, ()):
            if getattr(self, field) is None:
                shown = field.rstrip("_")
                raise ValueError(f"verifier of type {self.type!r} needs '{shown}'")
        if self.type in ("python_tests", "program_cases") and self.expected_field is None:
            raise ValueError(
                f"verifier of type {self.type!r} needs 'expected_field' (the input field with the"
                " tests or cases)"
            )
        if self.type == "file_state" and self.path is None and self.path_field is None:
            raise ValueError("verifier of type 'file_state' needs 'path' or 'path_field'")
        if self.type in ("exact_match", "numeric") and (
            self.expected is None and self.expected_field is None
        ):
            raise ValueError(f"verifier of type {self.type!r} needs 'expected' or 'expected_field'")
        if self.type == "contains" and not (self.all or self.none or self.expected_field):
            raise ValueError("verifier of type 'contains' needs 'all', 'none' or 'expected_field'")
        return self

    @property
    def label(self) -> str:
        return self.name or self.type


class RewardModel(Strict):
    """The second stage: a held-out reward model scoring each rollout after the verifiers.

    Either ``uri`` (``rm:DIR`` from `rlenv rm train`, ``hf-rm:DIR``, ``http(s)://URL``;
    directories relative to the spec) or a python ``function``. ``train_data`` pins the
    preference pairs the reward model was trained on; validate/run then check that no held-out
    input appears in them, nor in ``training_prompts`` (the policy's RL prompts), and that the
    pairs' prompts are not in ``training_pairs`` (the training reward model's preferences).
    """

    type: Literal["python", "uri"] | None = None
    uri: str | None = Field(None, pattern=r"^(rm:|hf-rm:|https?://)\S+$")
    function: str | None = Field(None, pattern=IMPORT_REF)
    options: dict[str, Any] = Field(default_factory=dict)
    train_data: FileRef | None = None
    training_prompts: FileRef | None = None
    training_pairs: FileRef | None = None
    on_leak: Literal["error", "warn"] = "error"

    @model_validator(mode="after")
    def _one_source(self) -> RewardModel:
        if (self.uri is None) == (self.function is None):
            raise ValueError("reward_model needs exactly one of 'uri' or 'function'")
        if self.type is not None and self.type != ("uri" if self.uri else "python"):
            raise ValueError(f"reward_model.type {self.type!r} does not match uri/function")
        return self


class Scrub(Strict):
    """Extra secret names to scrub when recording (headers, query, body fields)."""

    extra_names: list[str] = Field(default_factory=list)
    # `rlenv record` keeps error responses (HTTP >= 400, empty bodies), scrubbed, unless false
    record_errors: bool = True
    # cassette findings `validate` accepts: `sha256:HEX` of the flagged value (as the refusal
    # prints it) or `CASSETTE#interaction N`; never the value itself
    allow: list[str] = Field(default_factory=list)

    @field_validator("allow")
    @classmethod
    def _no_raw_values(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not re.fullmatch(r"sha256:[0-9a-f]{64}|[^#\s]+#interaction \d+", entry):
                raise ValueError(
                    f"entry {entry[:4]}… is neither sha256:<64 hex> nor CASSETTE#interaction N"
                    " (the allow-list never holds a secret itself)"
                )
        return value


class Limits(Strict):
    max_turns: int = Field(8, ge=1)
    timeout_s: float = Field(60.0, gt=0)


class EnvSpec(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*$")
    version: int = Field(1, ge=1)
    description: str = ""
    seed: int
    time: datetime
    model: str | None = None
    reference: str | None = None
    decoding: Decoding = Field(default_factory=Decoding)  # type: ignore[arg-type]
    system_prompt: str | None = None
    inputs: PinnedFile
    snapshot: PinnedFile | None = None
    tools: list[Tool] = Field(default_factory=list)
    verifiers: list[Verifier] = Field(min_length=1)
    reward_model: RewardModel | None = None
    rollouts: int = Field(1, ge=1)
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    scrub: Scrub | None = None
    python_path: list[str] = Field(default_factory=lambda: ["."])

    @field_validator("time")
    @classmethod
    def _zoned(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("frozen time needs a zone, e.g. 2025-01-01T00:00:00+00:00")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> EnvSpec:
        names = [tool.name for tool in self.tools]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"duplicate tool name(s): {', '.join(duplicated)}")
        labels = [verifier.label for verifier in self.verifiers]
        duplicated = sorted({label for label in labels if labels.count(label) > 1})
        if duplicated:
            raise ValueError(f"duplicate verifier name(s): {', '.join(duplicated)} (set 'name')")
        return self


class LoadedSpec:
    """A validated spec together with where it came from and its resolved files."""

    def __init__(self, spec: EnvSpec, path: Path, raw: dict[str, Any]) -> None:
        self.spec = spec
        self.path = path
        self.root = path.parent
        self.raw = raw

    def resolve(self, relative: str) -> Path:
        return (self.root / relative).resolve()

    @property
    def inputs_path(self) -> Path:
        return self.resolve(self.spec.inputs.path)

    @property
    def snapshot_path(self) -> Path | None:
        return self.resolve(self.spec.snapshot.path) if self.spec.snapshot else None

    def python_paths(self) -> list[Path]:
        return [self.resolve(entry) for entry in self.spec.python_path]

    def cassette_path(self, tool: Tool) -> Path | None:
        return self.resolve(tool.cassette.path) if tool.cassette else None

    def canonical(self) -> dict[str, Any]:
        """The spec as plain JSON data (defaults filled in, aliases used)."""
        return json.loads(self.spec.model_dump_json(by_alias=True))


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk a composed YAML node tree along a pydantic error location; return a 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if key_node.value == part:
                    found = (key_node, value_node)
                    break
            if found is None:
                return line
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def line_of(loaded: LoadedSpec, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of a field path (``("tools", 0, "function")``) in a loaded spec file."""
    try:
        node = yaml.compose(loaded.path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return _line_of(node, loc)


def _describe(error: Any) -> str:
    kind = error["type"]
    message = error["msg"]
    if kind == "extra_forbidden":
        return "unknown key (not part of the spec; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if kind in ("literal_error", "enum"):
        return message
    given = error.get("input")
    if isinstance(given, str | int | float | bool) and kind != "missing":
        return f"{message} (got {given!r})"
    return message


def _format_loc(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _strip_union_noise(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union-branch and tagged markers from an error location."""
    return tuple(
        part
        for part in loc
        if not (isinstance(part, str) and (part in ("Fallback", "literal['error']") or "[" in part))
    )


def load_spec(path: str | Path) -> LoadedSpec:
    """Load and validate an env spec; raise SpecError with file:line: field: problem."""
    spec_path = Path(path)
    if not spec_path.exists():
        raise SpecError("spec file not found", where=str(spec_path))
    if spec_path.is_dir():
        raise SpecError("is a directory, expected a YAML spec file", where=str(spec_path))
    try:
        text = spec_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec: {exc}", where=str(spec_path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{spec_path}:{mark.line + 1}" if mark else str(spec_path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"invalid YAML: {problem}", where=where) from None
    if raw is None:
        raise SpecError("spec is empty, expected a mapping of fields", where=str(spec_path))
    if not isinstance(raw, dict):
        raise SpecError(
            f"expected a mapping of fields at the top level, got {type(raw).__name__}",
            where=f"{spec_path}:1",
        )
    try:
        spec = EnvSpec.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = _strip_union_noise(tuple(error["loc"]))
        line = _line_of(node, loc)
        where = f"{spec_path}:{line}" if line else str(spec_path)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise SpecError(f"{_format_loc(loc)}: {_describe(error)}{more}", where=where) from None
    return LoadedSpec(spec, spec_path.resolve(), raw)
