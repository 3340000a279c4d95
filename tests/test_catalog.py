"""The bad-input catalog (beyond test_spec.py; issue 13 items 4 and 5), fuzzing of the CLI and
the readers, and `verify --perturb`."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlenv.errors import SpecError
from rlenv.spec import load_spec
from tests import bad_inputs
from tests.bad_inputs import Env, attempt, invoke
from tests.conftest import RLENV, EnvBuilder, cli

POLICY = "def policy(messages, tools, ctx):\n    return messages[-1]['content'].split()[-1]\n"


def _edit(spec: Path, change) -> None:
    document = yaml.safe_load(spec.read_text())
    change(document)
    spec.write_text(yaml.safe_dump(document, sort_keys=False))


def _snapshot_env(builder: EnvBuilder) -> Path:
    spec = builder.write(POLICY)
    snapshot = spec.parent / "snap"
    snapshot.mkdir()
    (snapshot / "f.txt").write_text("x")
    from rlenv.canonical import manifest_hash

    _edit(spec, lambda d: d.update(snapshot={"path": "snap", "sha256": manifest_hash(snapshot)}))
    return spec


CATALOG = [
    (
        "snapshot-missing",
        lambda s: shutil.rmtree(s.parent / "snap"),
        "snapshot.path: directory not found",
    ),
    (
        "snapshot-changed",
        lambda s: (s.parent / "snap" / "g.txt").write_text("new"),
        "snapshot.sha256: manifest hash mismatch",
    ),
    (
        "inputs-missing",
        lambda s: (s.parent / "inputs.jsonl").unlink(),
        "inputs.path: file not found",
    ),
    (
        "cassette-missing",
        lambda s: _edit(
            s,
            lambda d: d.update(
                tools=[{"name": "t", "function": "m:f", "cassette": {"path": "nope.yaml"}}]
            ),
        ),
        "fixtures not recorded yet (tools[0].cassette",
    ),
    (
        "cassette-hash",
        lambda s: (
            (s.parent / "c.yaml").write_text("interactions: []\nversion: 1\n"),
            _edit(
                s,
                lambda d: d.update(
                    tools=[
                        {
                            "name": "t",
                            "function": "m:f",
                            "cassette": {"path": "c.yaml", "sha256": "0" * 64},
                        }
                    ]
                ),
            ),
        ),
        "tools[0].cassette.sha256: hash mismatch",
    ),
    (
        "invalid-regex",
        lambda s: _edit(s, lambda d: d.update(verifiers=[{"type": "regex", "pattern": "(("}])),
        "invalid regex",
    ),
    (
        "invalid-json-schema",
        lambda s: _edit(
            s,
            lambda d: d.update(verifiers=[{"type": "json_schema", "schema": {"type": "nonsense"}}]),
        ),
        "invalid JSON schema",
    ),
    ("no-model", lambda s: _edit(s, lambda d: d.pop("model")), "no model: pass --model"),
    (
        "non-utf8-inputs",
        lambda s: (
            (s.parent / "inputs.jsonl").write_bytes(b"\xff\xfe"),
            _edit(
                s,
                lambda d: d["inputs"].update(
                    sha256=__import__("hashlib").sha256(b"\xff\xfe").hexdigest()
                ),
            ),
        ),
        "inputs file is not UTF-8",
    ),
]


@pytest.mark.parametrize("case_id,breaker,fragment", CATALOG, ids=[c[0] for c in CATALOG])
def test_catalog(env_builder: EnvBuilder, tmp_path: Path, case_id, breaker, fragment) -> None:
    spec = _snapshot_env(env_builder)
    breaker(spec)
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists(), "no run directory left behind"


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--rollouts", "0"], "--rollouts must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--resume"], "--resume needs --out"),
        (["--rollouts", "many"], "Invalid value for '--rollouts'"),
    ],
)
def test_bad_arguments(env_builder: EnvBuilder, args: list[str], fragment: str) -> None:
    spec = env_builder.write(POLICY)
    result = cli("run", str(spec), *args)
    assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_out_is_a_file_and_resume_without_run(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(POLICY)
    target = tmp_path / "file"
    target.write_text("precious")
    result = cli("run", str(spec), "--out", str(target))
    assert result.returncode == 2 and "is not a directory" in result.stderr
    assert target.read_text() == "precious"
    empty = tmp_path / "empty"
    empty.mkdir()
    resume = cli("run", str(spec), "--out", str(empty), "--resume")
    assert resume.returncode == 2 and "holds no run to resume" in resume.stderr


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    document=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=12),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "seed",
                        "time",
                        "inputs",
                        "verifiers",
                        "tools",
                        "decoding",
                        "rollouts",
                        "limits",
                        "path",
                        "sha256",
                        "type",
                        "x",
                    ]
                ),
                children,
                max_size=5,
            )
        ),
        max_leaves=20,
    )
)
def test_loader_fuzz_only_ever_raises_spec_errors(tmp_path_factory, document) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        load_spec(path)
    except SpecError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(str(path))


@given(text=st.text(max_size=200))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_loader_fuzz_raw_text(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(text)
    try:
        load_spec(path)
    except SpecError as error:
        assert "\n" not in str(error)


LISTING_TOOL = """
import os
def listing(args, ctx):
    return ",".join(os.listdir("."))  # unsorted: depends on the filesystem

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "listing", "arguments": "{}"}}]}
    return messages[-1]["content"]
"""


def test_verify_perturb_passes_clean_env_and_catches_listing_order(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(POLICY, rollouts=1)
    clean = cli("verify", str(spec), "--perturb")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert (
        "hash seed, timezone, locale, working directory, concurrency, listing order" in clean.stdout
    )
    builder = EnvBuilder(tmp_path / "leaky")
    leaky = builder.write(
        LISTING_TOOL,
        rollouts=1,
        tools=[{"name": "listing", "function": "MOD:listing"}],
        verifiers=[{"type": "regex", "pattern": "."}],
    )
    snapshot = leaky.parent / "snap"
    snapshot.mkdir()
    for name in ["delta", "alpha", "echo", "charlie", "bravo", "foxtrot"]:
        (snapshot / name).write_text(name)
    from rlenv.canonical import manifest_hash

    _edit(leaky, lambda d: d.update(snapshot={"path": "snap", "sha256": manifest_hash(snapshot)}))
    caught = cli("verify", str(leaky), "--perturb")
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "DIVERGED" in caught.stdout and "messages[2].content" in caught.stdout


# ---------------------------------------------------------------------------------------------
# Issue 13 item 4: every bad input gets one line naming the place (tests/bad_inputs.py).

IN_PROCESS = [
    case for case in bad_inputs.CATALOG if case.category != "in-world output" and not case.fresh
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case", IN_PROCESS, ids=[f"{c.category.replace(' ', '-')}/{c.name}" for c in IN_PROCESS]
)
def test_bad_input_catalog(case, tmp_path: Path) -> None:
    problem = attempt(case, tmp_path)
    assert problem is None, f"{case.category}/{case.name}: {problem}"


def test_catalog_is_large_enough() -> None:
    catalog = bad_inputs.CATALOG
    assert len(catalog) >= 120
    assert len({(case.category, case.name) for case in catalog}) == len(catalog)


WORLD_POLICY = """
BAD = {"p-set": {"content": {1}}, "p-bytes": {"content": b"a"},
       "p-nan": {"content": float("nan")}, "p-whole-set": {1, 2}}

def policy(messages, tools, ctx):
    return BAD.get(ctx.input_id, "fine")

def verifier(answer, record, ctx):
    return {
        "v-nan": float("nan"),
        "v-inf": float("-inf"),
        "v-dict-nan": {"passed": True, "score": float("nan")},
        "v-detail-set": {"passed": True, "detail": {1, 2}},
        "v-detail-bytes": {"passed": True, "detail": b"x"},
        "v-set": {1},
    }.get(record["id"], True)
"""
WORLD_EXPECTED = {
    "p-set": ("model_error", "content of type set"),
    "p-bytes": ("model_error", "content of type bytes"),
    "p-nan": ("model_error", "content of type float"),
    "p-whole-set": ("model_error", "returned set"),
    "v-nan": ("ok", "expected a finite number"),
    "v-inf": ("ok", "expected a finite number"),
    "v-dict-nan": ("ok", "expected a finite number"),
    "v-detail-set": ("ok", "detail=set"),
    "v-detail-bytes": ("ok", "detail=bytes"),
    "v-set": ("ok", "returned set"),
    "fine": ("ok", None),
}


@pytest.mark.timeout(120)
def test_in_world_outputs_that_are_not_json_become_statuses(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A policy's content or a verifier's verdict that is not JSON (set, bytes, NaN) is that
    rollout's status or failed verdict; the run finishes and every results line is strict
    JSON (a bare NaN was written before, and a set or bytes crashed the run)."""
    spec = env_builder.write(
        WORLD_POLICY,
        inputs=[{"id": key, "prompt": "go"} for key in WORLD_EXPECTED],
        verifiers=[{"type": "python", "function": "MOD:verifier"}],
        rollouts=1,
    )
    out = tmp_path / "run"
    outcome = invoke(["run", str(spec), "--out", str(out), "--concurrency", "2"])
    # a verifier failing on more than half its rollouts fails the run (issue 18: honest
    # outcomes), but it still finishes: summary written, every line strict JSON
    assert outcome.code in (0, 1), outcome.stderr
    assert outcome.code == 0 or "could not produce the scores" in outcome.stderr
    lines = (out / "results.jsonl").read_text().splitlines()

    def strict(name: str) -> None:
        raise ValueError(name)

    records = {r["input_id"]: r for r in (json.loads(x, parse_constant=strict) for x in lines)}
    assert set(records) == set(WORLD_EXPECTED)
    for key, (status, fragment) in WORLD_EXPECTED.items():
        record = records[key]
        assert record["status"] == status, (key, record["status"], record["error"])
        if key.startswith("p-"):
            assert fragment in record["error"], (key, record["error"])
        elif fragment:
            verdict = record["verifiers"][0]
            assert verdict["passed"] is False and fragment in verdict["detail"], (key, verdict)
        else:
            assert record["passed"] is True


@pytest.mark.timeout(60)
def test_fifos_do_not_hang(tmp_path: Path) -> None:
    """A spec path or an inputs path that is a FIFO: one line, exit 2, at once (the spec read
    blocked forever before). Through the real entry point: a regression hangs a subprocess."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result = cli("validate", str(fifo), timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "not a regular file" in result.stderr
    env = Env(tmp_path / "env")
    spec = env.write()
    (env.root / "inputs.jsonl").unlink()
    os.mkfifo(env.root / "inputs.jsonl")
    out = tmp_path / "out"
    result = cli("run", str(spec), "--out", str(out), timeout=30)
    assert result.returncode == 2 and "inputs.path: file not found" in result.stderr
    assert not out.exists()


@contextlib.contextmanager
def _filesystem(path: Path, size: str, read_only: bool = False):
    """A real small (or read-only) filesystem at `path`: a tmpfs when we may mount one, else
    None (the caller falls back to what an unprivileged user has: modes and RLIMIT_FSIZE)."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield "tmpfs" if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.timeout(60)
def test_out_on_a_read_only_filesystem(tmp_path: Path) -> None:
    spec = Env(tmp_path / "env").write()
    target = tmp_path / "ro"
    with _filesystem(target, "1m", read_only=True) as kind:
        if kind is None:
            target.chmod(0o555)
        result = cli("run", str(spec), "--out", str(target / "run"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "cannot create the run directory: " in result.stderr
    assert ("Read-only file system" if kind else "Permission denied") in result.stderr


BIG_ANSWER = "def policy(messages, tools, ctx):\n    return 'x' * 60000\n"


@pytest.mark.timeout(120)
def test_disk_that_fills_mid_run(tmp_path: Path) -> None:
    """The disk fills after a few rollouts: exit 1 and one line, every line already written is
    whole strict JSON, no summary; after making room, --resume finishes the same run."""
    env = Env(tmp_path / "env")
    spec = env.write(policy=BIG_ANSWER, extra="rollouts: 4\n")
    disk = tmp_path / "disk"
    with _filesystem(disk, "200k") as kind:
        out = disk / "run"
        limits = None
        if kind is None:  # no mount: the same failure from a file size limit (EFBIG)

            def limits() -> None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

        result = subprocess.run(
            [str(RLENV), "run", str(spec), "--out", str(out), "--concurrency", "1"],
            capture_output=True,
            text=True,
            timeout=100,
            preexec_fn=limits,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 1, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "cannot write to" in result.stderr and "--resume" in result.stderr
        text = (out / "results.jsonl").read_text()
        assert text.endswith("\n") or text == ""
        written = [json.loads(line) for line in text.splitlines()]
        assert 1 <= len(written) < 8 and not (out / "summary.json").exists()
        moved = tmp_path / "moved"
        shutil.copytree(out, moved)
    resumed = cli("run", str(spec), "--out", str(moved), "--resume", "--concurrency", "1")
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in (moved / "results.jsonl").read_text().splitlines()]
    assert len(records) == 8 and records[: len(written)] == written


@pytest.mark.timeout(120)
def test_a_run_that_dies_before_its_first_rollout_leaves_no_directory(tmp_path: Path) -> None:
    """A policy that imports here but not in a worker: one line saying why (was a traceback
    per worker), and --out is not left blocked for the next run. The workers are where the
    run's import checks happen (env code never runs in the orchestrator): the user's error,
    exit 2, at the spec's `model:` line."""
    env = Env(tmp_path / "env")
    broken = (
        "import multiprocessing\n"
        "if multiprocessing.current_process().name != 'MainProcess':\n"
        "    raise ImportError('not in a worker')\n"
    )
    spec = env.write(policy=broken + "def policy(messages, tools, ctx):\n    return 'a'\n")
    out = tmp_path / "out"
    result = cli("run", str(spec), "--out", str(out))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{spec}:" in result.stderr and "not in a worker" in result.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Issue 13 item 5: fuzzing the CLI arguments and the inputs/cassette readers. Property: exit 0,
# 1 or 2, never a traceback, one line on stderr for an error, never a hang (the per-test
# timeout), never a half-written run directory. Deterministic (derandomize) and bounded.

FUZZ = settings(
    max_examples=40,
    deadline=timedelta(seconds=60),
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**31, 2**53, 10**23, 2**200, -(2**70)]),
    st.sampled_from(["1e23", "2e8", "nan", "inf", "-0", "", " 1", "0x10", "1.5", "abc", "\u2028"]),
)
OUTS = ["fresh", "file", "under-file", "proc", "sys", "holds-run", "empty-dir", None]
MODELS = [None, "bogus:x", "python:no_such_mod_q:f", "", "python:os", "replay:/nope.jsonl"]


def _fuzz_out(kind: str | None, scratch: Path) -> list[str]:
    if kind is None:
        return []
    target = {
        "fresh": scratch / "out",
        "file": scratch / "out",
        "under-file": scratch / "afile" / "out",
        "proc": Path("/proc/rlenv-fuzz"),
        "sys": Path("/sys/rlenv-fuzz"),
        "holds-run": scratch / "out",
        "empty-dir": scratch / "out",
    }[kind]
    if kind == "file":
        target.write_text("precious")
    elif kind == "under-file":
        (scratch / "afile").write_text("precious")
    elif kind == "holds-run":
        target.mkdir()
        (target / "run.json").write_text("{}")
    elif kind == "empty-dir":
        target.mkdir()
    return ["--out", str(target)]


def _state_of(path: Path) -> object:
    if path.is_dir():
        return {entry.name: entry.read_bytes() for entry in path.iterdir() if entry.is_file()}
    return path.read_bytes() if path.is_file() else None


def _strict_lines(path: Path) -> list[dict]:
    def refuse(name: str) -> None:
        raise ValueError(name)

    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a torn last line"
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


@pytest.mark.timeout(240)
@FUZZ
@given(
    command=st.sampled_from(["run", "validate", "grade", "report", "compare"]),
    spec_kind=st.sampled_from(["good", "good", "missing", "directory", "fifo", "broken"]),
    options=st.lists(
        st.tuples(
            st.sampled_from(
                ["--limit", "--rollouts", "--concurrency", "--expensive-fraction", "--runs"]
            ),
            NUMBERS,
        ),
        max_size=3,
    ),
    out=st.sampled_from(OUTS),
    model=st.sampled_from(MODELS),
    flags=st.lists(
        st.sampled_from(["--resume", "--json", "--frobnicate", "extra-arg"]), max_size=2
    ),
)
def test_cli_fuzz(command, spec_kind, options, out, model, flags) -> None:
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        env = Env(scratch / "env")
        spec = env.write(inputs='{"id": "a", "prompt": "say a", "answer": "a"}\n')
        if spec_kind == "missing":
            spec = scratch / "nope.yaml"
        elif spec_kind == "directory":
            spec = scratch
        elif spec_kind == "fifo":
            spec = scratch / "fifo.yaml"
            os.mkfifo(spec)
        elif spec_kind == "broken":
            spec.write_text(spec.read_text() + "seed: 1\n")  # a duplicate key
        args = [command, str(spec)]
        for name, value in options:
            args += [name, str(value)]
        out_args = _fuzz_out(out, scratch) if command == "run" else []
        args += out_args
        if model is not None and command == "run":
            args += ["--model", model]
        args += flags
        target = Path(out_args[1]) if out_args else None
        before = _state_of(target) if target else None
        outcome = invoke(args)
        assert outcome.code in (0, 1, 2), (args, outcome.code, outcome.stderr[-2000:])
        assert "Traceback" not in outcome.stderr, (args, outcome.stderr[-2000:])
        if outcome.code != 0:
            lines = outcome.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("rlenv: error: "), (args, lines)
        if target is None or not target.is_relative_to(scratch):
            return
        if outcome.code == 2:
            assert _state_of(target) == before, (args, "changed --out")
        elif outcome.code == 0:
            assert (target / "summary.json").is_file()
            assert len(_strict_lines(target / "results.jsonl")) >= 1
        elif target.exists() and (target / "run.json").exists():
            _strict_lines(target / "results.jsonl")  # resumable: whole strict lines only


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**53 - 1, 2**53, -(2**64), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    st.sampled_from(["\u2028", "\u2029", "\x85", "a\rb", "\ufeff"]),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "prompt", "messages", "role", "content", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.timeout(120)
@settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lines=st.lists(
        st.one_of(
            JSON_VALUES.map(lambda value: json.dumps(value, ensure_ascii=False)),
            st.fixed_dictionaries(
                {
                    "id": st.one_of(st.text(max_size=3), st.integers()),
                    "prompt": st.text(max_size=5),
                },
                optional={"n": JSON_VALUES},
            ).map(lambda value: json.dumps(value, ensure_ascii=False)),
            st.integers(1, 3000).map(
                lambda depth: '{"id": "d", "prompt": "p", "n": ' + _deep(depth) + "}"
            ),
            st.text(max_size=20),
        ),
        max_size=4,
    ),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_inputs_reader_fuzz(tmp_path_factory, lines: list[str], newline: str) -> None:
    """load_inputs returns records that are all strict, canonicalisable JSON, or raises one
    SpecError line naming file:line; nothing else (no RecursionError, no ValueError)."""
    from rlenv.canonical import canonical_bytes
    from rlenv.inputs import load_inputs

    path = tmp_path_factory.mktemp("inputs") / "inputs.jsonl"
    path.write_text(newline.join(lines) + newline, encoding="utf-8")
    try:
        records = load_inputs(path)
    except SpecError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path)), str(error)
        return
    for record in records:
        json.dumps(record.data, allow_nan=False)  # strict: no NaN or infinities
        canonical_bytes(record.data)  # canonicalisable: no integer past 2**53


HTTP_ANY = st.one_of(
    st.none(),
    st.integers(-5, 700),
    st.text(max_size=6),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.booleans(),
    st.floats(allow_nan=False),
)


def _maybe(value, other):
    return st.one_of(st.just(value), other)


@pytest.mark.timeout(120)
@settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    interactions=st.lists(
        st.fixed_dictionaries(
            {
                "request": st.fixed_dictionaries(
                    {
                        "method": _maybe("POST", HTTP_ANY),
                        "uri": _maybe("http://api.test/q?a=1", HTTP_ANY),
                        "body": _maybe('{"q": 1}', HTTP_ANY),
                        "headers": _maybe({"content-type": ["application/json"]}, HTTP_ANY),
                    }
                ),
                "response": _maybe(
                    {
                        "status": {"code": 200, "message": "OK"},
                        "headers": {},
                        "body": {"string": "{}"},
                    },
                    st.fixed_dictionaries(
                        {
                            "status": _maybe(
                                {"code": 200, "message": "OK"}, HTTP_ANY.map(lambda c: {"code": c})
                            ),
                            "headers": _maybe({}, HTTP_ANY),
                            "body": _maybe({"string": "x"}, HTTP_ANY.map(lambda b: {"string": b})),
                        }
                    ),
                ),
            }
        ),
        max_size=3,
    ),
    suffix=st.sampled_from([".yaml", ".json"]),
)
def test_cassette_reader_fuzz(tmp_path_factory, interactions, suffix: str) -> None:
    """Reading and indexing a cassette gives an index or one SpecError line naming the file."""
    from rlenv.world.replay import load_index
    from rlenv.world.scrub import Scrubber

    path = tmp_path_factory.mktemp("cassette") / f"c{suffix}"
    document = {"interactions": interactions, "version": 1}
    path.write_text(json.dumps(document) if suffix == ".json" else yaml.safe_dump(document))
    try:
        index, _ = load_index(path, Scrubber())
    except SpecError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path)), str(error)
        return
    assert len(index) <= len(interactions)
