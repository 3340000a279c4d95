"""The env spec: YAML (safe loader) into pydantic models that forbid unknown keys.

Every error names the file, the line where it can, the field path and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from rlenv.canonical import SAFE_INTEGER
from rlenv.errors import Problems, SpecError, UserError
from rlenv.spec_base import (  # noqa: F401  (re-exported: rlenv.spec is where they are looked up)
    CALLABLES,
    IMPORT_REF,
    Decoding,
    Fallback,
    FileRef,
    McpServer,
    PinnedFile,
    Strict,
    signature,
)
from rlenv.spec_data import (  # noqa: F401  (re-exported: worker code reads them from spec_data)
    DEFAULT_MARKERS,
    DEFAULT_NORMALISE,
    SERVICE_DOMAIN,
    JudgeRules,
    LoadedRules,
    Marker,
    Normalise,
    ServiceRules,
    VerifierRules,
    WhenRules,
    line_of,
)
from rlenv.spec_user import SimulatedUser

# YAML (`rlenv.user_yaml`, `rlenv.spec_compose`) is imported where a spec file is read: a
# frozen-world worker is sent its spec as data (`WorkerConfig.loaded_spec`) and reads none

NUMERIC_OPTIONS = ("extract", "markers", "locale", "base")


MAX_ROLLOUTS = 100_000
"""Rollouts per input, in the spec or from --rollouts (more is a typo, not a run)."""
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MIN_TIMEOUT_S = 0.01


class DatasetSplit(Strict):
    """A Hugging Face `datasets` split as inputs: a hub dataset at a commit (read from the local
    hub cache, never downloaded at run time) or a local directory (``save_to_disk`` output, or
    parquet/JSON/CSV data files). Pinned by the sha256 of its rows as canonical JSON lines."""

    name: str | None = Field(None, min_length=1)  # hub id, e.g. "openai/gsm8k"
    path: str | None = Field(None, min_length=1)  # relative to the spec
    config: str | None = None
    split: str = Field(min_length=1)
    revision: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    id_field: str | None = Field(None, min_length=1)  # default: "id", else the row number

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSplit:
        if (self.name is None) == (self.path is None):
            raise ValueError("give exactly one of 'name' (a hub dataset) or 'path' (a local one)")
        if self.name is not None and self.revision is None:
            raise ValueError(
                "a hub dataset needs 'revision': the 40-hex commit it was read at (a branch moves)"
            )
        return self


class Inputs(Strict):
    """Where inputs come from: a JSONL/CSV file (``path``) or a datasets split (``dataset``)."""

    path: str | None = None
    dataset: DatasetSplit | None = None
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _one_source(self) -> Inputs:
        if (self.path is None) == (self.dataset is None):
            raise ValueError("give exactly one of 'path' (a JSONL or CSV file) or 'dataset'")
        return self


class Tool(Strict):
    name: str = Field(pattern=r"^[A-Za-z_][\w-]*$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    function: str | None = Field(None, pattern=IMPORT_REF, description=signature("tool"))
    mcp: McpServer | None = None  # or `function`: one of the two
    cassette: FileRef | None = None
    on_miss: Literal["error"] | Fallback = "error"

    @model_validator(mode="after")
    def _one_implementation(self) -> Tool:
        if (self.function is None) == (self.mcp is None):
            raise ValueError("give exactly one of 'function' (pkg.module:name) or 'mcp'")
        return self


class Judge(Strict, JudgeRules):
    """A model-graded verifier's judge: an OpenAI-compatible chat model and a rubric (jinja2 over
    the input's fields, ``answer`` and ``prompt``); its replies are recorded by `rlenv record`
    into ``cassette`` and replayed by `rlenv run`. ``mode``: ``replay`` (only the cassette),
    ``record_missing`` (a miss is judged live and appended to the cassette), ``live`` (every
    answer judged live; no cassette needed)."""

    model: str = Field(pattern=r"^openai:\S+$")
    rubric: str
    mode: Literal["replay", "record_missing", "live"] = "replay"
    cassette: FileRef | None = None
    score_pattern: str = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)"
    scale: tuple[float, float] = (0.0, 1.0)
    threshold: float = Field(0.5, ge=0, le=1)
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1)
    base_url: str | None = None  # where `record` reaches the judge (else OPENAI_BASE_URL)

    @model_validator(mode="after")
    def _checks(self) -> Judge:
        if self.scale[1] <= self.scale[0]:
            raise ValueError("judge.scale: [low, high] with high > low")
        if self.cassette is None and self.mode != "live":
            raise ValueError(f"judge mode {self.mode!r} needs a cassette: {{path: ...}}")
        try:
            if re.compile(self.score_pattern).groups < 1:
                raise ValueError("judge.score_pattern needs a group capturing the number")
        except re.error as exc:
            raise ValueError(f"judge.score_pattern: {exc}") from None
        return self


class When(Strict, WhenRules):
    """A verifier applies to an input when its `field` is present (and not null), or, with
    `equals`/`in`, when the field has that value / one of those values."""

    field: str
    equals: Any = None
    in_: list[Any] | None = Field(None, alias="in")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_test(self) -> When:
        if "equals" in self.model_fields_set and self.in_ is not None:
            raise ValueError("when: give 'equals' or 'in', not both")
        return self


class Verifier(Strict, VerifierRules):
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
        "judge",
        "sqlite_state",
        "json_state",
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
    # numeric: which number is graded (README "Text verifiers"); ambiguous answers fail
    extract: Literal["final", "whole", "math"] = "final"
    markers: list[Marker] = Field(default=list(DEFAULT_MARKERS))  # pydantic copies it
    locale: Literal["en", "de", "fr", "ch", "plain"] = "en"
    base: Literal[2, 8, 10, 16] = 10
    all: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    function: str | None = Field(None, pattern=IMPORT_REF, description=signature("verifier"))
    path: str | None = None
    path_field: str | None = None
    sha256: str | None = None
    contains: str | None = None
    exists: bool | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    # expensive verifiers (a test suite, a benchmark) can be sampled, deferred and cached
    cost: Literal["cheap", "expensive"] = "cheap"
    version: str = "1"
    # only for the inputs this matches; elsewhere the verifier is "not applicable" (no verdict)
    when: When | None = None
    judge: Judge | None = None  # type: judge

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

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
        if (self.type == "judge") != (self.judge is not None):
            raise ValueError("a verifier of type 'judge' needs 'judge' (and only it may have one)")
        if (
            self.type in ("file_state", "sqlite_state", "json_state")
            and self.path is None
            and self.path_field is None
        ):
            raise ValueError(f"verifier of type {self.type!r} needs 'path' or 'path_field'")
        if self.path is not None and (
            Path(self.path).is_absolute() or ".." in Path(self.path).parts
        ):
            raise ValueError(
                f"'path' {self.path!r} leaves the rollout's workdir: give one inside it"
            )
        if self.type in ("exact_match", "numeric") and (
            self.expected is None and self.expected_field is None
        ):
            raise ValueError(f"verifier of type {self.type!r} needs 'expected' or 'expected_field'")
        if self.type == "contains" and not (self.all or self.none or self.expected_field):
            raise ValueError("verifier of type 'contains' needs 'all', 'none' or 'expected_field'")
        self._check_numeric()
        if isinstance(self.expected, list) and None in self.expected:
            raise ValueError("'expected' holds null: a null gold value would compare as 'None'")
        return self

    def _check_numeric(self) -> None:
        declared = set(self.model_fields_set)
        if self.type != "numeric" and declared & set(NUMERIC_OPTIONS):
            shown = ", ".join(sorted(declared & set(NUMERIC_OPTIONS)))
            raise ValueError(f"{shown}: only for verifiers of type 'numeric'")
        exact = {"tolerance", "relative_tolerance", "locale", "base"}
        if self.extract == "math" and declared & exact:
            shown = ", ".join(sorted(declared & exact))
            raise ValueError(f"{shown}: not with extract: math (math-verify decides equality)")
        if self.base != 10 and "locale" in declared:
            raise ValueError("locale: only for base 10 (other bases read integers)")


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
    function: str | None = Field(None, pattern=IMPORT_REF, description=signature("reward_model"))
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


class Ready(Strict):
    """When a started service counts as up: an HTTP path answering 2xx, or its TCP port open."""

    http: str | None = Field(None, pattern=r"^/")
    tcp: bool = False
    timeout_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _one_probe(self) -> Ready:
        if (self.http is None) == (not self.tcp):
            raise ValueError("ready needs exactly one of 'http: /path' or 'tcp: true'")
        return self


class Service(Strict, ServiceRules):
    """A local service `rlenv record` starts itself (under libfaketime at the spec's instant) and
    stops afterwards. `command` runs in the spec's directory with `{port}` (and `$PORT`) set to
    a free loopback port; tools reach it at the logical `base_url`, which is all a cassette
    stores."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,40}$")
    command: list[str] = Field(min_length=1)
    ready: Ready = Field(default_factory=lambda: Ready.model_validate({"tcp": True}))
    env: dict[str, str] = Field(default_factory=dict)


class Limits(Strict):
    max_turns: int = Field(8, ge=1, le=10_000)
    timeout_s: float = Field(60.0, ge=MIN_TIMEOUT_S, le=MAX_TIMEOUT_S)


class RewardComponent(Strict):
    """One term of the composite reward: a verifier (its pass as 1/0, or its score), the
    reward model's score, or a python function ``fn(prompt, answer, ctx) -> float`` (a python
    reward model's signature), times `weight`. `fallback`: in training (`rlenv.trl`), the value
    given when the component cannot score a completion (counted as
    ``rewards/<name>/errors``); without it, that is an error."""

    verifier: str | None = None
    use: Literal["passed", "score"] = "passed"
    reward_model: bool = False
    function: str | None = Field(
        None, pattern=IMPORT_REF, description=signature("reward_component")
    )
    weight: float = 1.0
    fallback: float | None = None

    @model_validator(mode="after")
    def _one_source(self) -> RewardComponent:
        sources = [self.verifier is not None, self.reward_model, self.function is not None]
        if sum(sources) != 1:
            raise ValueError(
                "a reward component needs exactly one of verifier, reward_model, function"
            )
        if not math.isfinite(self.weight):
            raise ValueError("weight must be a finite number")
        return self


class CompositeReward(Strict):
    """``reward: {components: {name: {...}}}``: each rollout's record carries every component
    and their weighted sum (``rewards``); TRL logs each as ``rewards/<name>/mean``."""

    components: dict[str, RewardComponent] = Field(min_length=1)

    @field_validator("components")
    @classmethod
    def _names(cls, value: dict[str, RewardComponent]) -> dict[str, RewardComponent]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_]\w*", name) or name == "total":
                raise ValueError(f"component name {name!r}: use letters, digits, _ (not 'total')")
        return value


class FewShot(Strict):
    input: dict[str, Any]  # fields the template is rendered with
    answer: str  # the assistant's reply in the example


class PromptTemplate(Strict):
    """The user message built from an input's fields (jinja2, sandboxed, undefined fields are
    an error), after the few-shot examples rendered with the same template."""

    template: str
    few_shot: list[FewShot] = Field(default_factory=list)


class EnvSpec(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*$")
    version: int = Field(1, ge=1)
    description: str = ""
    seed: int = Field(ge=-SAFE_INTEGER, le=SAFE_INTEGER)
    time: datetime
    model: str | None = Field(  # a policy URI; a python: policy is called as below
        None, description="policy URI; python:pkg.mod:fn is " + signature("policy")
    )
    reference: str | None = None
    decoding: Decoding = Field(default_factory=Decoding)  # type: ignore[arg-type]
    system_prompt: str | None = None
    prompt: PromptTemplate | None = None
    inputs: Inputs
    # prompts for training (rlenv.trl.dataset); never the held-out inputs (validate checks)
    train_inputs: Inputs | None = None
    snapshot: PinnedFile | None = None
    tools: list[Tool] = Field(default_factory=list)
    services: list[Service] = Field(default_factory=list)
    user: SimulatedUser | None = None  # a conversation with a simulated user (rlenv.spec_user)
    verifiers: list[Verifier] = Field(min_length=1)
    reward_model: RewardModel | None = None
    reward: CompositeReward | None = None
    rollouts: int = Field(1, ge=1, le=MAX_ROLLOUTS)
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
        labels = [verifier.label for verifier in self.verifiers]
        for what, names in (
            ("tool name(s)", [tool.name for tool in self.tools]),
            ("service name(s)", [service.name for service in self.services]),
            ("verifier name(s)", labels),
        ):
            duplicated = sorted({name for name in names if names.count(name) > 1})
            if duplicated:
                hint = " (set 'name')" if what.startswith("verifier") else ""
                raise ValueError(f"duplicate {what}: {', '.join(duplicated)}{hint}")
        for name, component in (self.reward.components if self.reward else {}).items():
            if component.verifier is not None and component.verifier not in labels:
                raise ValueError(
                    f"reward.components.{name}: no verifier named {component.verifier!r}"
                    f" (verifiers: {', '.join(labels)})"
                )
            if component.reward_model and self.reward_model is None:
                raise ValueError(f"reward.components.{name}: the spec has no reward_model")
        return self


class LoadedSpec(LoadedRules):
    """A validated spec together with where it came from and its resolved files (the paths:
    `rlenv.spec_data.LoadedRules`; sent to a worker as `rlenv.spec_data.as_data` of it)."""

    spec: EnvSpec

    def __init__(self, spec: EnvSpec, path: Path, raw: dict[str, Any]) -> None:
        self.spec = spec
        self.path = path
        self.root = path.parent
        self.raw = raw

    def canonical(self) -> dict[str, Any]:
        """The spec as plain JSON data (defaults filled in, aliases used); an env without
        services keeps the fingerprint it had before `services:` existed."""
        data: dict[str, Any] = json.loads(self.spec.model_dump_json(by_alias=True))
        if not data.get("services"):
            data.pop("services", None)
        if data.get("user") is None:
            data.pop("user", None)
        # fields added later, at their defaults, leave the fingerprint as it was
        for verifier in data.get("verifiers") or []:
            judge = verifier.get("judge") or {}
            if judge.get("mode") == "replay":
                judge.pop("mode")
        for component in ((data.get("reward") or {}).get("components") or {}).values():
            if component.get("fallback") is None:
                component.pop("fallback", None)
        return data


def json_schema() -> dict[str, Any]:
    """The env spec's JSON Schema (draft 2020-12), generated from `EnvSpec` so it cannot drift;
    validation-mode, so it describes what a YAML file may hold (aliases such as ``schema``)."""
    document = EnvSpec.model_json_schema(by_alias=True, mode="validation")
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "rlenv env spec"
    return document


def load_spec(path: str | Path) -> LoadedSpec:
    """Load and validate an env spec; raise SpecError with file:line: field: problem."""
    from rlenv import user_yaml as user
    from rlenv.spec_compose import EXTENDS, compose

    spec_path = Path(path)
    text = user.read_user_text(spec_path, "spec file")
    node, raw = user.read_yaml(spec_path, text)
    if raw is None:
        raise SpecError("spec is empty, expected a mapping of fields", where=str(spec_path))
    if not isinstance(raw, dict):
        raise SpecError(
            f"expected a mapping of fields at the top level, got {type(raw).__name__}",
            where=f"{spec_path}:1",
        )
    if EXTENDS in raw:  # a variant: its base's fields under its own
        raw = compose(spec_path, node, raw)
    try:
        spec = EnvSpec.model_validate(raw)
    except ValidationError as exc:
        problems: list[UserError] = []
        for error in exc.errors():
            loc = user.error_location(tuple(error["loc"]))
            line = user.line_at(node, loc)
            where = f"{spec_path}:{line}" if line else str(spec_path)
            described = user.describe_error(error) + user.hash_hint(spec_path, raw, loc, error)
            problems.append(SpecError(f"{user.format_loc(loc)}: {described}", where=where))
        raise (problems[0] if len(problems) == 1 else Problems(problems)) from None
    return LoadedSpec(spec, spec_path.resolve(), raw)
