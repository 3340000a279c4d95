"""The bad-input catalog (issue 13 item 4): malformed specs, inputs files, cassettes, command
lines, run directories and in-world outputs, each with the exit code and the one line it must
give. Used by tests/test_catalog.py (in process) and bench/bad_inputs.py (through the real
`rlenv` entry point, printing tried/held per category).

A case *holds* when the command exits with the expected code, says nothing on stderr but one
line naming the place (`rlenv: error: WHERE: ...`, with the expected fragment), prints no
traceback, leaves no run directory behind when it refused the run, and every results line it
did write is strict JSON (no bare NaN).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POLICY = "def policy(messages, tools, ctx):\n    return messages[-1]['content'].split()[-1]\n"
INPUTS = (
    '{"id": "a", "prompt": "say a", "answer": "a"}\n{"id": "b", "prompt": "say b", "answer": "b"}\n'
)
VERIFIERS = "verifiers:\n- type: exact_match\n  expected_field: answer\n"


class Env:
    """A small env written as raw text (so a case can break the YAML itself)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"badmod_{uuid.uuid4().hex[:10]}"
        root.mkdir(parents=True, exist_ok=True)

    def write(
        self,
        *,
        inputs: str | bytes = INPUTS,
        policy: str = POLICY,
        extra: str = "",
        verifiers: str = VERIFIERS,
        seed: str = "7",
        model: str | None = None,
        head: str = "",
    ) -> Path:
        (self.root / f"{self.module}.py").write_text(policy)
        data = inputs.encode() if isinstance(inputs, str) else inputs
        (self.root / "inputs.jsonl").write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        model = model if model is not None else f"python:{self.module}:policy"
        spec = self.root / "env.yaml"
        spec.write_text(
            f"{head}name: bad-env\nseed: {seed}\ntime: '2024-03-01T12:00:00+00:00'\n"
            f"model: {model}\ninputs:\n  path: inputs.jsonl\n  sha256: {sha}\n"
            f"{verifiers}{extra}"
        )
        return spec

    def cassette(self, text: str, name: str = "c.yaml") -> Path:
        """A tool whose cassette is `text`, pinned by hash."""
        path = self.root / name
        path.write_text(text)
        sha = hashlib.sha256(text.encode()).hexdigest()
        (self.root / f"{self.module}_tool.py").write_text("def tool(args, ctx):\n    return 'x'\n")
        return self.write(
            extra=f"tools:\n- name: t\n  function: {self.module}_tool:tool\n"
            f"  cassette:\n    path: {name}\n    sha256: {sha}\n"
        )


@dataclass(frozen=True)
class Case:
    category: str
    name: str
    build: Callable[[Env, Path], list[str]]  # (env, scratch dir) -> the rlenv arguments
    code: int
    fragment: str
    records: bool = False  # exit 0: check every results line is strict JSON and its status
    environ: dict[str, str] | None = None  # environment variables set while it runs
    fresh: bool = False  # needs an interpreter of its own (only through the entry point)


@dataclass
class Outcome:
    code: int | str
    stdout: str
    stderr: str


def invoke(args: list[str]) -> Outcome:
    """Run the CLI in this process, as `rlenv ARGS` would (same app, same error handling)."""
    from rlenv.cli import app
    from rlenv.commands._common import run_app

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["rlenv", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = run_app(app)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            code = "traceback"
            err.write(traceback.format_exc())
        finally:
            sys.argv = saved
    return Outcome(code, out.getvalue(), err.getvalue())


def _state(path: Path) -> object:
    """What is at a path: nothing, a file's bytes, or a directory's listing."""
    if path.is_dir():
        return sorted(entry.name for entry in path.iterdir())
    return path.read_bytes() if path.is_file() else None


def judge(case: Case, outcome: Outcome, out: Path, before: object = None) -> str | None:
    """None when the case held, else what went wrong (one line)."""
    lines = outcome.stderr.strip().splitlines()
    if "Traceback" in outcome.stderr or outcome.code == "traceback":
        return f"traceback: {lines[-1] if lines else ''}"
    if outcome.code != case.code:
        return f"exit {outcome.code}, expected {case.code}: {(lines or [''])[-1][:160]}"
    if case.code != 0:
        if len(lines) != 1 or not lines[0].startswith("rlenv: error: "):
            return f"{len(lines)} stderr lines: {outcome.stderr[:200]!r}"
        if case.fragment not in lines[0]:
            return f"message lacks {case.fragment!r}: {lines[0][:200]}"
        if case.code == 2 and _state(out) != before:
            return f"changed --out: {before} -> {_state(out)}"
        return None
    if not case.records and case.fragment not in outcome.stdout + outcome.stderr:
        return f"output lacks {case.fragment!r}"
    if case.records:
        results = out / "results.jsonl"
        if not results.is_file():
            return "no results.jsonl"
        for line in results.read_text().split("\n"):
            if not line:
                continue
            try:
                record = json.loads(line, parse_constant=_refuse)
            except ValueError as exc:
                return f"results line is not strict JSON: {exc}"
            if case.fragment and case.fragment not in json.dumps(record):
                return f"record lacks {case.fragment!r}"
    return None


def _refuse(name: str) -> None:
    raise ValueError(f"bare {name}")


# --------------------------------------------------------------------------- building blocks


def _validate(**write: object) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: ["validate", str(env.write(**write))]  # type: ignore[arg-type]


def _run(*args: str, **write: object) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: [
        "run",
        str(env.write(**write)),  # type: ignore[arg-type]
        "--out",
        str(tmp / "out"),
        "--concurrency",
        "1",
        *args,
    ]


def _spec_text(text: str) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        env.write()
        spec = env.root / "raw.yaml"
        spec.write_text(text)
        return ["validate", str(spec)]

    return build


def _spec_bytes(data: bytes) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        spec = env.root / "raw.yaml"
        spec.write_bytes(data)
        return ["validate", str(spec)]

    return build


def _edited(change: Callable[[str], str]) -> Callable[[Env, Path], list[str]]:
    """validate a spec whose text is `change(valid spec text)`."""

    def build(env: Env, tmp: Path) -> list[str]:
        spec = env.write()
        spec.write_text(change(spec.read_text()))
        return ["validate", str(spec)]

    return build


def _bomb(levels: int = 9) -> str:
    lines = ["x0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"x{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def _cassette(
    body: str = "'{\"q\": 1}'", status: str = "{code: 200, message: OK}", **more: str
) -> str:
    request = more.get(
        "request",
        f"    body: {body}\n    headers: {{}}\n    method: POST\n    uri: http://api.test/q\n",
    )
    response = more.get(
        "response",
        f"    status: {status}\n    headers: {{}}\n    body:\n      string: '{{\"a\": 1}}'\n",
    )
    return f"interactions:\n- request:\n{request}  response:\n{response}version: 1\n"


def _with_cassette(text: str) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: ["validate", str(env.cassette(text))]


def _inputs(text: str | bytes) -> Callable[[Env, Path], list[str]]:
    return _validate(inputs=text)


def _limits(value: str) -> Callable[[Env, Path], list[str]]:
    return _validate(extra=f"limits:\n  timeout_s: {value}\n")


def _option(extra: str) -> Callable[[Env, Path], list[str]]:
    """A verifier option (any YAML value: the spec's free-form part)."""
    return _validate(
        verifiers=f"verifiers:\n- type: exact_match\n  expected_field: answer\n  options:\n{extra}"
    )


def _fifo_spec(env: Env, tmp: Path) -> list[str]:
    path = tmp / "spec.fifo"
    os.mkfifo(path)
    return ["validate", str(path)]


def _fifo_inputs(env: Env, tmp: Path) -> list[str]:
    spec = env.write()
    (env.root / "inputs.jsonl").unlink()
    os.mkfifo(env.root / "inputs.jsonl")
    return ["validate", str(spec)]


def _big_spec(env: Env, tmp: Path) -> list[str]:
    path = tmp / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(17 << 20)  # sparse: costs nothing on disk
    return ["validate", str(path)]


def _out_under_file(env: Env, tmp: Path) -> list[str]:
    (tmp / "afile").write_text("precious")
    return ["run", str(env.write()), "--out", str(tmp / "afile" / "run")]


def _out_is_file(env: Env, tmp: Path) -> list[str]:
    (tmp / "out").write_text("precious")
    return ["run", str(env.write()), "--out", str(tmp / "out")]


def _out_holds_run(env: Env, tmp: Path) -> list[str]:
    (tmp / "out").mkdir()
    (tmp / "out" / "run.json").write_text("{}")
    return ["run", str(env.write()), "--out", str(tmp / "out")]


def _resume_empty(env: Env, tmp: Path) -> list[str]:
    (tmp / "empty").mkdir()
    return ["run", str(env.write()), "--out", str(tmp / "empty"), "--resume"]


def _out_fixed(path: str) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: ["run", str(env.write()), "--out", path]


def _verifier_returns(value: str) -> Callable[[Env, Path], list[str]]:
    def build(env: Env, tmp: Path) -> list[str]:
        (env.root / f"{env.module}_v.py").write_text(
            f"def v(answer, record, ctx):\n    return {value}\n"
        )
        spec = env.write(verifiers=f"verifiers:\n- type: python\n  function: {env.module}_v:v\n")
        return ["run", str(spec), "--out", str(tmp / "out"), "--limit", "1", "--concurrency", "1"]

    return build


def _policy_returns(value: str) -> Callable[[Env, Path], list[str]]:
    return lambda env, tmp: [
        "run",
        str(env.write(policy=f"def policy(messages, tools, ctx):\n    return {value}\n")),
        "--out",
        str(tmp / "out"),
        "--limit",
        "1",
        "--concurrency",
        "1",
    ]


HUGE = "9" * 5000
OK_STATUS = "    status: {code: 200, message: OK}\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _catalog() -> list[Case]:
    cases: list[Case] = []

    def add(category: str, name: str, build, code: int, fragment: str, **kw) -> None:  # type: ignore[no-untyped-def]
        cases.append(Case(category, name, build, code, fragment, **kw))

    # ---- the spec file itself: reading and YAML
    c = "spec file"
    add(c, "fifo", _fifo_spec, 2, "not a regular file")
    add(c, "directory", lambda e, t: ["validate", str(t)], 2, "is a directory")
    add(c, "missing", lambda e, t: ["validate", str(t / "nope.yaml")], 2, "spec file not found")
    add(c, "char-device", lambda e, t: ["validate", "/dev/zero"], 2, "not a regular file")
    add(c, "over-16-MiB", _big_spec, 2, "is refused")
    add(c, "not-utf8", _spec_bytes(b"name: \xff\n"), 2, "spec file is not UTF-8")
    add(c, "non-printable-char", _spec_bytes(b"name: a\x07b\n"), 2, "invalid YAML")
    add(c, "nul-byte", _spec_bytes(b"name: a\x00\n"), 2, "invalid YAML")
    add(c, "empty", _spec_text(""), 2, "spec is empty")
    add(c, "only-comment", _spec_text("# nothing\n"), 2, "spec is empty")
    add(c, "top-level-list", _spec_text("- a\n- b\n"), 2, "expected a mapping")
    add(c, "top-level-scalar", _spec_text("42\n"), 2, "expected a mapping")
    add(c, "syntax-error", _spec_text("name: [unclosed\n"), 2, "invalid YAML")
    add(c, "tab-indent", _spec_text("name: x\n\tseed: 1\n"), 2, "invalid YAML")
    add(c, "two-documents", _spec_text("name: a\n---\nname: b\n"), 2, "invalid YAML")
    add(c, "undefined-alias", _spec_text("name: *nothing\n"), 2, "invalid YAML")
    add(
        c, "python-tag", _spec_text("name: !!python/object/apply:os.getcwd []\n"), 2, "invalid YAML"
    )
    add(c, "duplicate-top-key", _edited(lambda s: s + "seed: 8\n"), 2, "duplicate key 'seed'")
    add(
        c,
        "duplicate-nested-key",
        _edited(
            lambda s: s.replace(
                "  path: inputs.jsonl\n", "  path: inputs.jsonl\n  path: other.jsonl\n"
            )
        ),
        2,
        "duplicate key 'path'",
    )
    add(
        c,
        "duplicate-key-in-list-item",
        _edited(
            lambda s: s.replace("- type: exact_match\n", "- type: exact_match\n  type: regex\n")
        ),
        2,
        "duplicate key 'type'",
    )
    add(c, "alias-bomb-alone", _spec_text(_bomb()), 2, "expands to more than")
    add(
        c,
        "alias-bomb-in-options",
        _option("    " + _bomb().replace("\n", "\n    ").rstrip() + "\n"),
        2,
        "expands to more than",
    )
    add(
        c,
        "deep-flow-list",
        _spec_text("a: " + "[" * 5_000 + "]" * 5_000 + "\n"),
        2,
        "nested more than 64 levels deep",
    )
    add(
        c,
        "deep-flow-map",
        _spec_text("a: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"),
        2,
        "nested more than 64 levels deep",
    )
    add(
        c,
        "deep-70-in-options",
        _option("    deep: " + "[" * 70 + "]" * 70 + "\n"),
        2,
        "nested more than 64",
    )
    add(c, "binary-tag", _option("    blob: !!binary aGVsbG8=\n"), 2, "bytes is not JSON")
    add(c, "set-tag", _option("    s: !!set {a, b}\n"), 2, "not JSON")
    add(c, "int-key", _option("    1: one\n"), 2, "not a string")
    add(c, "huge-int-option", _option(f"    n: {HUGE[:40]}\n"), 2, "outside +/-(2**53 - 1)")
    add(c, "nan-option", _option("    x: .nan\n"), 2, "not a JSON number")
    add(c, "inf-option", _option("    x: -.inf\n"), 2, "not a JSON number")

    # ---- fields of the spec
    c = "spec fields"
    add(c, "seed-2**200", _validate(seed=str(2**200)), 2, "seed: integer with 61 digits")
    add(c, "seed-2**53", _validate(seed=str(2**53)), 2, "seed")
    add(c, "seed-negative-huge", _validate(seed=str(-(2**60))), 2, "seed")
    add(c, "seed-float", _validate(seed="1.5"), 2, "seed")
    add(c, "seed-string", _validate(seed="abc"), 2, "seed")
    add(c, "seed-nan", _validate(seed=".nan"), 2, "seed")
    add(c, "seed-list", _validate(seed="[1]"), 2, "seed")
    for value in ("1e300", ".inf", "-.inf", ".nan", "1e-12", "0", "-1", "forever", "1e9"):
        add(c, f"timeout-{value}", _limits(value), 2, "limits.timeout_s")
    add(c, "max-turns-0", _validate(extra="limits:\n  max_turns: 0\n"), 2, "limits.max_turns")
    add(
        c,
        "max-turns-1e6",
        _validate(extra="limits:\n  max_turns: 1000000\n"),
        2,
        "limits.max_turns",
    )
    add(c, "rollouts-0", _validate(extra="rollouts: 0\n"), 2, "rollouts")
    add(c, "rollouts-2e8", _validate(extra="rollouts: 200000000\n"), 2, "rollouts")
    add(c, "rollouts-2**70", _validate(extra=f"rollouts: {2**70}\n"), 2, "rollouts")
    add(
        c,
        "temperature-inf",
        _validate(extra="decoding:\n  temperature: .inf\n"),
        2,
        "decoding.temperature",
    )
    add(
        c,
        "temperature-nan",
        _validate(extra="decoding:\n  temperature: .nan\n"),
        2,
        "decoding.temperature",
    )
    add(
        c,
        "temperature-negative",
        _validate(extra="decoding:\n  temperature: -1\n"),
        2,
        "decoding.temperature",
    )
    add(c, "top-p-2", _validate(extra="decoding:\n  top_p: 2\n"), 2, "decoding.top_p")
    add(
        c, "max-tokens-0", _validate(extra="decoding:\n  max_tokens: 0\n"), 2, "decoding.max_tokens"
    )
    add(
        c,
        "max-tokens-2**80",
        _validate(extra=f"decoding:\n  max_tokens: {2**80}\n"),
        2,
        "decoding.max_tokens",
    )
    add(
        c,
        "decoding-seed-2**64",
        _validate(extra=f"decoding:\n  seed: {2**64}\n"),
        2,
        "decoding.seed",
    )
    add(
        c,
        "tolerance-inf",
        _validate(verifiers="verifiers:\n- type: numeric\n  expected: 1\n  tolerance: .inf\n"),
        2,
        "tolerance",
    )
    add(
        c,
        "expected-huge-int",
        _validate(verifiers=f"verifiers:\n- type: exact_match\n  expected: {2**64}\n"),
        2,
        "verifiers[0].expected",
    )
    add(c, "time-no-zone", _edited(lambda s: s.replace("+00:00", "")), 2, "time")
    add(
        c,
        "time-garbage",
        _edited(lambda s: s.replace("'2024-03-01T12:00:00+00:00'", "yesterday")),
        2,
        "time",
    )
    add(
        c,
        "time-int",
        _edited(lambda s: s.replace("'2024-03-01T12:00:00+00:00'", str(2**70))),
        2,
        "time",
    )
    add(c, "unknown-key", _validate(extra="sed: 1\n"), 2, "sed: unknown key")
    add(c, "no-verifiers", _validate(verifiers="verifiers: []\n"), 2, "verifiers")
    add(
        c,
        "verifier-type-unknown",
        _validate(verifiers="verifiers:\n- type: fuzzy\n"),
        2,
        "verifiers[0].type",
    )
    add(c, "name-with-slash", _edited(lambda s: s.replace("name: bad-env", "name: a/b")), 2, "name")
    add(c, "version-0", _validate(extra="version: 0\n"), 2, "version")
    add(
        c,
        "inputs-sha-not-hex",
        _edited(lambda s: s.replace("sha256: ", "sha256: zz", 1)),
        2,
        "inputs.sha256",
    )
    add(c, "python-path-int", _validate(extra="python_path: 5\n"), 2, "python_path")
    add(c, "model-unknown-scheme", _validate(model="bogus:x"), 2, "bad model URI 'bogus:x'")
    add(c, "model-no-scheme", _validate(model="justaname"), 2, "bad model URI")
    add(
        c,
        "model-python-no-function",
        lambda e, t: ["validate", str(e.write(model=f"python:{e.module}"))],
        2,
        "expected python:pkg.module:function",
    )
    add(
        c,
        "model-module-missing",
        _validate(model="python:no_such_module_xyz:f"),
        2,
        "cannot import module",
    )
    add(
        c,
        "model-function-missing",
        lambda e, t: ["validate", str(e.write(model=f"python:{e.module}:nope"))],
        2,
        "has no 'nope'",
    )
    add(
        c,
        "model-not-callable",
        lambda e, t: [
            "validate",
            str(e.write(model=f"python:{e.module}:POLICY", policy=POLICY + "POLICY = 3\n")),
        ],
        2,
        "is not callable",
    )
    add(
        c,
        "model-import-raises",
        lambda e, t: ["validate", str(e.write(policy="raise RuntimeError('boom')\n"))],
        2,
        "importing",
    )

    # ---- the held-out inputs file
    c = "inputs file"
    base = '{"id": "a", "prompt": "say a", "answer": "a"'
    add(
        c,
        "huge-int-5000-digits",
        _inputs(base + f', "n": {HUGE}}}\n'),
        2,
        "inputs.jsonl:1: invalid JSON",
    )
    add(c, "int-2**64", _inputs(base + f', "n": {2**64}}}\n'), 2, "n: integer with 20 digits")
    add(c, "deep-100000", _inputs(base + f', "n": {DEEP_JSON}}}\n'), 2, "nested too deeply")
    add(
        c,
        "deep-70",
        _inputs(base + ', "n": ' + "[" * 70 + "]" * 70 + "}\n"),
        2,
        "nested more than 64",
    )
    add(c, "nan-literal", _inputs(base + ', "n": NaN}\n'), 2, "NaN is not strict JSON")
    add(
        c,
        "infinity-literal",
        _inputs(base + ', "n": Infinity}\n'),
        2,
        "Infinity is not strict JSON",
    )
    add(
        c,
        "minus-infinity",
        _inputs(base + ', "n": -Infinity}\n'),
        2,
        "-Infinity is not strict JSON",
    )
    add(c, "float-overflow", _inputs(base + ', "n": 1e400}\n'), 2, "not a JSON number")
    add(c, "trailing-comma", _inputs(base + ",}\n"), 2, "invalid JSON")
    add(c, "truncated", _inputs(base + "\n"), 2, "invalid JSON")
    add(c, "list-line", _inputs("[1, 2]\n"), 2, "expected a JSON object per line")
    add(c, "string-line", _inputs('"a"\n'), 2, "expected a JSON object per line")
    add(c, "missing-id", _inputs('{"prompt": "x"}\n'), 2, "needs an 'id'")
    add(c, "bool-id", _inputs('{"id": true, "prompt": "x"}\n'), 2, "needs an 'id'")
    add(c, "empty-id", _inputs('{"id": "", "prompt": "x"}\n'), 2, "needs an 'id'")
    add(
        c,
        "duplicate-id",
        _inputs('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n'),
        2,
        "duplicate input id",
    )
    add(c, "no-prompt", _inputs('{"id": "a"}\n'), 2, "needs a 'prompt'")
    add(c, "prompt-not-string", _inputs('{"id": "a", "prompt": 5}\n'), 2, "needs a 'prompt'")
    add(
        c,
        "messages-not-list",
        _inputs('{"id": "a", "messages": "hi"}\n'),
        2,
        "'messages' must be a list",
    )
    add(
        c,
        "message-without-role",
        _inputs('{"id": "a", "messages": [{"content": "hi"}]}\n'),
        2,
        "'messages' must be a list",
    )
    add(c, "not-utf8", _inputs(b'{"id": "a", "prompt": "\xff"}\n'), 2, "not UTF-8")
    add(c, "empty", _inputs(""), 2, "has no records")
    add(c, "blank-lines-only", _inputs("\n \n\n"), 2, "has no records")
    add(
        c, "control-char-in-string", _inputs('{"id": "a", "prompt": "a\x01b"}\n'), 2, "invalid JSON"
    )
    add(c, "fifo", _fifo_inputs, 2, "inputs.path: file not found")
    # valid JSON that must be accepted (rejected before: str.splitlines broke the line)
    add(
        c,
        "U+2028-in-string-accepted",
        _inputs(base.replace("say a", "say\u2028 a") + "}\n"),
        0,
        "ok: bad-env",
    )
    add(
        c,
        "U+2029-in-string-accepted",
        _inputs(base.replace("say a", "say\u2029 a") + "}\n"),
        0,
        "ok: bad-env",
    )
    add(
        c,
        "U+0085-in-string-accepted",
        _inputs(base.replace("say a", "say\u0085 a") + "}\n"),
        0,
        "ok: bad-env",
    )
    add(c, "CRLF-accepted", _inputs(base + "}\r\n"), 0, "ok: bad-env")
    add(c, "int-2**53-1-accepted", _inputs(base + f', "n": {2**53 - 1}}}\n'), 0, "ok: bad-env")

    # ---- tool cassettes
    c = "cassette"
    add(c, "request-body-number", _with_cassette(_cassette(body="5")), 2, "request.body is a int")
    add(
        c,
        "request-body-mapping",
        _with_cassette(_cassette(body="{a: 1}")),
        2,
        "request.body is a dict",
    )
    add(
        c,
        "request-body-list",
        _with_cassette(_cassette(body="[1, 2]")),
        2,
        "request.body is a list",
    )
    add(
        c,
        "response-no-status",
        _with_cassette(_cassette(response="    headers: {}\n    body:\n      string: x\n")),
        2,
        "response.status.code is None",
    )
    add(
        c,
        "response-status-abc",
        _with_cassette(_cassette(status="{code: abc, message: OK}")),
        2,
        "response.status.code is 'abc'",
    )
    add(
        c,
        "response-status-99",
        _with_cassette(_cassette(status="{code: 99, message: OK}")),
        2,
        "response.status.code is 99",
    )
    add(
        c,
        "response-status-600",
        _with_cassette(_cassette(status="{code: 600, message: OK}")),
        2,
        "response.status.code is 600",
    )
    add(
        c,
        "response-status-true",
        _with_cassette(_cassette(status="{code: true, message: OK}")),
        2,
        "response.status.code is True",
    )
    add(
        c,
        "response-status-string-200",
        _with_cassette(_cassette(status="{code: '200', message: OK}")),
        2,
        "response.status.code is '200'",
    )
    add(
        c,
        "response-not-mapping",
        _with_cassette(_cassette(response="    - 1\n")),
        2,
        "response is a list",
    )
    add(
        c,
        "response-no-body",
        _with_cassette(
            _cassette(response="    status: {code: 200, message: OK}\n    headers: {}\n")
        ),
        2,
        "response.body needs a 'string'",
    )
    add(
        c,
        "response-body-number",
        _with_cassette(_cassette(response=OK_STATUS + "    headers: {}\n    body: {string: 5}\n")),
        2,
        "cassette cannot be read",
    )
    add(
        c,
        "response-headers-list",
        _with_cassette(_cassette(response=OK_STATUS + "    headers: [1]\n    body: {string: x}\n")),
        2,
        "response.headers",
    )
    add(c, "no-interactions-key", _with_cassette("version: 1\n"), 2, "cassette cannot be read")
    add(
        c,
        "interactions-not-list",
        _with_cassette("interactions: 5\nversion: 1\n"),
        2,
        "cassette cannot be read",
    )
    add(c, "garbage-yaml", _with_cassette("interactions: [\n"), 2, "cassette cannot be read")
    add(c, "empty-file", _with_cassette("\n"), 2, "cassette cannot be read")
    add(
        c,
        "request-no-method",
        _with_cassette(
            _cassette(request="    body: null\n    headers: {}\n    uri: http://api.test/q\n")
        ),
        2,
        "cassette cannot be read",
    )
    add(
        c,
        "request-uri-number",
        _with_cassette(
            _cassette(request="    body: null\n    headers: {}\n    method: GET\n    uri: 5\n")
        ),
        2,
        "cassette",
    )
    add(
        c,
        "python-tag",
        _with_cassette("interactions: !!python/object/apply:os.getcwd []\n"),
        2,
        "cassette cannot be read",
    )
    add(c, "body-null-accepted", _with_cassette(_cassette(body="null")), 0, "ok: bad-env")

    # ---- command-line arguments
    c = "arguments"
    add(c, "limit-1e23-int", _run("--limit", str(10**23)), 2, "--limit must be at most")
    add(c, "limit-1e23-text", _run("--limit", "1e23"), 2, "Invalid value for '--limit'")
    add(c, "limit-0", _run("--limit", "0"), 2, "--limit must be at least 1")
    add(c, "limit-negative", _run("--limit", "-5"), 2, "--limit must be at least 1")
    add(c, "rollouts-2e8", _run("--rollouts", "200000000"), 2, "--rollouts must be at most")
    add(c, "rollouts-2**70", _run("--rollouts", str(2**70)), 2, "--rollouts must be at most")
    add(c, "rollouts-0", _run("--rollouts", "0"), 2, "--rollouts must be at least 1")
    add(c, "rollouts-text", _run("--rollouts", "many"), 2, "Invalid value for '--rollouts'")
    add(c, "concurrency-0", _run("--concurrency", "0"), 2, "--concurrency must be at least 1")
    add(c, "concurrency-1e6", _run("--concurrency", "1000000"), 2, "--concurrency must be at most")
    add(c, "expensive-fraction-2", _run("--expensive-fraction", "2"), 2, "--expensive-fraction")
    add(c, "expensive-fraction-nan", _run("--expensive-fraction", "nan"), 2, "--expensive-fraction")
    add(c, "executor-unknown", _run("--executor", "moon"), 2, "--executor")
    add(c, "unknown-option", _run("--frobnicate"), 2, "No such option")
    add(
        c,
        "resume-without-out",
        lambda e, t: ["run", str(e.write()), "--resume"],
        2,
        "--resume needs --out",
    )
    add(c, "resume-empty-dir", _resume_empty, 2, "holds no run to resume")
    add(c, "model-unknown-scheme", _run("--model", "bogus:x"), 2, "bad model URI 'bogus:x'")
    add(c, "model-empty", _run("--model", ""), 2, "--model is empty")
    add(
        c,
        "model-module-missing",
        _run("--model", "python:no_such_module_xyz:f"),
        2,
        "--model: model python:no_such_module_xyz:f: cannot import",
    )
    add(
        c,
        "model-python-no-function",
        _run("--model", "python:os"),
        2,
        "expected python:pkg.module:function",
    )
    add(
        c,
        "model-replay-missing",
        _run("--model", "replay:/nonexistent/r.jsonl"),
        2,
        "replay file not found",
    )
    add(
        c,
        "reference-with-python-model",
        _run("--reference", "hf:/x"),
        2,
        "--reference needs an hf:PATH",
    )
    add(
        c,
        "validate-two-specs",
        lambda e, t: ["validate", str(e.write()), "other.yaml"],
        2,
        "Got unexpected extra argument",
    )

    # ---- where the run directory goes
    c = "run directory"
    add(
        c,
        "out-under-a-file",
        _out_under_file,
        2,
        "Not a directory",
    )
    add(c, "out-is-a-file", _out_is_file, 2, "exists and is not a directory")
    add(c, "out-under-proc", _out_fixed("/proc/rlenv-run"), 2, "cannot create the run directory")
    add(
        c,
        "out-under-proc-self",
        _out_fixed("/proc/self/rlenv-run"),
        2,
        "cannot create the run directory",
    )
    add(c, "out-under-sys", _out_fixed("/sys/rlenv-run"), 2, "cannot create the run directory")
    add(c, "out-holds-a-run", _out_holds_run, 2, "already holds a run")

    # ---- what in-world code hands back (a rollout status, the run finishes, lines stay JSON)
    c = "in-world output"
    for label, value, fragment in [
        ("verifier-nan", "float('nan')", "expected a finite number"),
        ("verifier-inf", "float('inf')", "expected a finite number"),
        ("verifier-dict-nan-score", "{'passed': True, 'score': float('nan')}", "finite"),
        ("verifier-detail-set", "{'passed': True, 'detail': {1, 2}}", "detail=set"),
        ("verifier-detail-bytes", "{'passed': True, 'detail': b'x'}", "detail=bytes"),
        ("verifier-detail-dict", "{'passed': True, 'detail': {'a': 1}}", "detail=dict"),
        ("verifier-returns-set", "{1}", "returned set"),
    ]:
        # a verifier that fails on every rollout fails the run (issue 18's honest outcomes:
        # exit 1, one line naming it), its records written as strict JSON
        add(c, label, _verifier_returns(value), 1, fragment, records=True)
    for label, value, fragment in [
        ("policy-content-set", "{'content': {1}}", "content of type set"),
        ("policy-content-bytes", "{'content': b'a'}", "content of type bytes"),
        ("policy-content-nan", "{'content': float('nan')}", "content of type float"),
        ("policy-returns-set", "{1, 2}", "model_error"),
    ]:
        add(c, label, _policy_returns(value), 0, fragment, records=True)
    return cases


CATALOG: list[Case] = _catalog()


def attempt(case: Case, scratch: Path, run: Callable[[list[str]], Outcome] = invoke) -> str | None:
    """Build the case under `scratch` (a fresh directory), run it (with its environment
    variables), judge it."""
    env = Env(scratch / "env")
    sys.path.insert(0, str(env.root))
    saved = {name: os.environ.get(name) for name in case.environ or {}}
    try:
        args = case.build(env, scratch)
        before = _state(scratch / "out")
        os.environ.update(case.environ or {})
        outcome = run(args)
    finally:
        sys.path.remove(str(env.root))
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return judge(case, outcome, scratch / "out", before)


from tests.bad_inputs_day_one import day_one_cases  # noqa: E402  (it builds on the above)

CATALOG += day_one_cases()
