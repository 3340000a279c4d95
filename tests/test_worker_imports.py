"""A frozen-world worker imports only what it needs: every MB counts, times each worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EnvBuilder, probe_report

PROBE = """
import json, sys, tempfile
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig

config = WorkerConfig(
    spec_path=sys.argv[1], work_root=tempfile.mkdtemp(), model_uri=sys.argv[2]
)
protocol.init_worker(config)
record = protocol.handle("run_rollout", RolloutTask(0, 0))
loaded = sorted({name.split(".")[0] for name in sys.modules})
import httpx._main  # env code that wants httpx's command-line client still gets it
worlds = sorted(name for name in sys.modules if name.startswith("rlenv.world."))
print(json.dumps({"status": record["status"], "loaded": loaded, "worlds": worlds}), file=sys.stderr)
"""

POLICY = """
def policy(messages, tools, ctx):
    return "a"
"""


def _loaded(spec: Path, model: str, tmp_path: Path, code: str = PROBE) -> dict:
    """Run probe `code` on `spec` and `model` in a fresh interpreter: what it printed last on
    stderr, as JSON."""
    probe = tmp_path / "probe.py"
    probe.write_text(code)
    return probe_report([str(probe), str(spec), model], spec.parent)  # type: ignore[no-any-return]


def test_a_worker_without_tools_loads_no_schema_validator_nor_httpx_cli(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(POLICY)
    seen = _loaded(spec, f"python:{env_builder.module}:policy", tmp_path)
    assert seen["status"] == "ok"
    # nothing to replay: no vcrpy, nor the HTTP clients it patches (a third of a second each)
    for heavy in ("jsonschema", "rich", "pygments", "click", "httpx", "vcr", "aiohttp", "numpy"):
        assert heavy not in seen["loaded"], f"the worker imported {heavy}"
    for part in ("replay", "replay_patch", "scrub", "secrets", "mcp", "mcp_client"):
        assert f"rlenv.world.{part}" not in seen["worlds"], f"the worker imported {part}"


TOOL_POLICY = """
import httpx  # an HTTP tool's client: replay patches it (and no other client)

def tool(args, ctx):
    return "ok"

def policy(messages, tools, ctx):
    return "a"
"""


def test_a_worker_with_tools_checks_arguments_without_compiling_iri_grammars(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """jsonschema imports rfc3987_syntax (when installed) for its `iri` format, which compiles
    39 lark grammars at import: ~4.5 s of a worker's start, for a format tool arguments never
    check. The worker defers it to the first `iri` check (`rlenv.json_schema`)."""
    parameters = {"type": "object", "minProperties": 0}  # not plain: jsonschema checks it
    spec = env_builder.write(
        TOOL_POLICY, tools=[{"name": "t", "function": "MOD:tool", "parameters": parameters}]
    )
    seen = _loaded(spec, f"python:{env_builder.module}:policy", tmp_path)
    assert seen["status"] == "ok"
    assert "jsonschema" in seen["loaded"]
    assert "lark" not in seen["loaded"], "the worker compiled rfc3987_syntax's grammars"
    for deferred in ("rfc3986_validator", "isoduration", "arrow"):  # uri, duration formats
        assert deferred not in seen["loaded"], f"the worker imported {deferred}"
    assert "httpx" in seen["loaded"]  # the tool's own import
    for heavy in ("rich", "pygments", "click"):  # httpx's command-line client
        assert heavy not in seen["loaded"], f"the worker imported {heavy}"


def test_a_worker_whose_tools_take_plain_arguments_imports_no_jsonschema(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A tool whose schema is plain (`rlenv.worker.tools.plain_check`) is checked without
    jsonschema (and its referencing, rpds and attrs: ~3 MB, a sixth of a one-tool worker's
    start) until a call's arguments fail the plain check."""
    parameters = {
        "type": "object",
        "properties": {"term": {"type": "string", "description": "what to look up"}},
        "required": ["term"],
        "additionalProperties": False,
    }
    spec = env_builder.write(
        TOOL_POLICY, tools=[{"name": "t", "function": "MOD:tool", "parameters": parameters}]
    )
    seen = _loaded(spec, f"python:{env_builder.module}:policy", tmp_path)
    assert seen["status"] == "ok"
    for heavy in ("jsonschema", "referencing", "rpds", "attrs"):
        assert heavy not in seen["loaded"], f"the worker imported {heavy}"


IRI_PROBE = """
import json, sys
from rlenv.json_schema import load_jsonschema

jsonschema = load_jsonschema()
before = "lark" in sys.modules
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
answers = [checker.conforms(value, "iri") for value in ("https://é.example/ü", "not an iri", 7)]
print(json.dumps({"before": before, "answers": answers, "after": "lark" in sys.modules}))
"""


def test_the_iri_format_is_still_checked_when_first_asked(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987_syntax not installed: jsonschema checks no iri here")
    result = subprocess.run(
        [sys.executable, "-c", IRI_PROBE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)
    assert seen == {"before": False, "answers": [True, False, True], "after": True}


def _probe(tmp_path: Path, config: Any, code: str, cwd: Path) -> Any:
    """Run `code` (a probe script) on the pickled worker `config` in a fresh interpreter; what
    it printed last on stderr, as JSON."""
    import pickle

    (tmp_path / "work").mkdir()
    sent = tmp_path / "config.pickle"
    sent.write_bytes(pickle.dumps(config))
    probe = tmp_path / "probe.py"
    probe.write_text(code)
    return probe_report([str(probe), str(sent)], cwd)


SENT_PROBE = """
import json, pickle, sys
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask

protocol.init_worker(pickle.loads(open(sys.argv[1], "rb").read()))
record = protocol.handle("run_rollout", RolloutTask(0, 0))
import pydantic

def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)

built = sorted({c.__qualname__ for c in subclasses(pydantic.BaseModel) if c.__pydantic_complete__})
scanned = "pydantic.plugin._loader" in sys.modules
yaml = "yaml" in sys.modules
print(json.dumps({"status": record["status"], "built": built, "scanned": scanned, "yaml": yaml}),
      file=sys.stderr)
"""


MISSED = {"status": 404, "body": {"error": "not recorded"}}  # a declared fallback


@pytest.mark.parametrize("tools", [True, False], ids=["one-tool", "no-tools"])
def test_a_worker_sent_its_spec_builds_no_spec_validator(
    env_builder: EnvBuilder, tmp_path: Path, tools: bool
) -> None:
    """The local executor loads the spec once and sends it to each worker as data
    (`WorkerConfig.loaded_spec`), pickled as multiprocessing sends it: the worker builds no
    pydantic validator or serializer (the spec's took a third of its start) and never scans
    the installed distributions for pydantic plugins, through a whole rollout; without tools
    it imports no YAML at all (vcrpy, replaying a tool's HTTP, does)."""

    from rlenv.spec import load_spec
    from rlenv.worker.config import WorkerConfig

    spec = env_builder.write(
        TOOL_POLICY if tools else POLICY,
        tools=[{"name": "t", "function": "MOD:tool", "parameters": {}, "on_miss": MISSED}]
        if tools
        else [],
        decoding={"temperature": 0.5, "stop": ["x"]},
    )
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path / "work"),
        model_uri=f"python:{env_builder.module}:policy",
        loaded_spec=load_spec(spec),
        world_checks={"purpose": "run", "model": None, "defer_expensive": False},  # as `run`
        cache_dir=str(tmp_path / "grader-cache"),  # `run` keeps one (for expensive verifiers)
    )
    seen = _probe(tmp_path, config, SENT_PROBE, spec.parent)
    assert seen == {"status": "ok", "built": [], "scanned": False, "yaml": tools}


FORMATS_PROBE = """
import json, sys
from rlenv.json_schema import load_jsonschema

jsonschema = load_jsonschema()
deferred = ("rfc3986_validator", "isoduration", "arrow", "rfc3987_syntax", "lark")
before = [name for name in deferred if name in sys.modules]
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
registered = sorted(set(checker.checkers) & {"duration", "uri", "uri-reference", "iri"})
cases = {
    "duration": ["P1D", "P1", "1D", "PT1H", "P", 7],
    "uri": ["https://x.org/a b", "https://x.org/a", "not a uri", 7],
    "uri-reference": ["/a/b", "http://[x", 7],
}
answers = {name: [checker.conforms(v, name) for v in values] for name, values in cases.items()}
import isoduration, rfc3986_validator
real = [hasattr(isoduration, "format_duration"), hasattr(rfc3986_validator, "URI_RE")]
print(json.dumps({"before": before, "registered": registered, "answers": answers, "real": real}))
"""


def test_the_uri_and_duration_formats_are_checked_as_before_when_first_asked() -> None:
    """rfc3986_validator (uri) and isoduration (duration, which imports arrow) are stand-ins
    while jsonschema imports: nothing of them is loaded until the first check, the checkers
    are registered, the answers are jsonschema's own (pinned from a plain `import jsonschema`),
    and code importing either library afterwards gets the real one."""
    result = subprocess.run(
        [sys.executable, "-c", FORMATS_PROBE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)
    assert seen == {
        "before": [],
        "registered": ["duration", "iri", "uri", "uri-reference"],
        "answers": {
            "duration": [True, False, False, True, False, True],
            "uri": [False, True, False, True],
            "uri-reference": [True, False, True],
        },
        "real": [True, True],
    }


STAND_IN_PROBE = """
import json, sys
from rlenv.json_schema import load_jsonschema

load_jsonschema()
left = "rfc3987_syntax" in sys.modules  # importing the real one compiles its grammars: 4 s
import isoduration, rfc3986_validator  # env code of its own, before any check
real = [hasattr(isoduration, "format_duration"), hasattr(rfc3986_validator, "URI_RE")]
print(json.dumps([left, *real]))
"""


def test_code_importing_a_deferred_library_gets_the_real_one() -> None:
    result = subprocess.run(
        [sys.executable, "-c", STAND_IN_PROBE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == [False, True, True]


DURATION_VERIFIER = {
    "name": "shape",
    "type": "json_schema",
    "schema": {"type": "object", "properties": {"took": {"type": "string", "format": "duration"}}},
}


def test_a_worker_imports_the_format_libraries_its_graders_need_at_its_start(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Each rollout is graded in a fresh child of the worker: a library the grader's format
    needs is imported once, as the worker starts, not at every rollout's first check."""
    spec = env_builder.write(
        'def policy(messages, tools, ctx):\n    return \'{"took": "P1D"}\'\n',
        verifiers=[DURATION_VERIFIER],
    )
    seen = _loaded(spec, f"python:{env_builder.module}:policy", tmp_path, START_PROBE)
    assert seen == {"at_start": True, "status": "ok", "passed": True}


START_PROBE = """
import json, sys, tempfile
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig

config = WorkerConfig(spec_path=sys.argv[1], work_root=tempfile.mkdtemp(), model_uri=sys.argv[2])
protocol.init_worker(config)
at_start = hasattr(sys.modules.get("isoduration"), "format_duration")
record = protocol.handle("run_rollout", RolloutTask(0, 0))
print(json.dumps({"at_start": at_start, "status": record["status"], "passed": record["passed"]}),
      file=sys.stderr)
"""


CHECKED_MODULE = """
import sys
from rlenv.spec import EnvSpec

print("spec built:", EnvSpec.__pydantic_complete__, file=sys.stderr)

def policy(messages, tools, ctx):
    return "a"
"""


def test_the_checking_child_of_validate_is_sent_the_spec(env_builder: EnvBuilder) -> None:
    """`rlenv validate` imports the env's modules in a checking child; the child is sent the
    spec the orchestrator loaded (as a worker is), so it does not build the spec's validator
    again (a third of the child's start)."""
    spec = env_builder.write(CHECKED_MODULE)
    result = subprocess.run(
        [sys.executable, "-m", "rlenv", "validate", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=spec.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "spec built: False" in result.stderr, result.stderr[-3000:]


HELD_PROBE = """
import gc, json, pickle, sys
from rlenv.inputs import EnvInput
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask

protocol.init_worker(pickle.loads(open(sys.argv[1], "rb").read()))
held = sum(isinstance(thing, EnvInput) for thing in gc.get_objects())
records = [protocol.handle("run_rollout", RolloutTask(index, 0)) for index in (0, 149, 7)]
ids = [(record["input_id"], record["input_index"], record["answer"]) for record in records]
print(json.dumps({"held": held, "ids": ids}), file=sys.stderr)
"""


def test_a_worker_parses_an_input_when_a_rollout_asks_for_it(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """The orchestrator has checked the inputs file: a worker keeps its lines and parses the
    record a call asks for, so it holds no parsed record at its start (each held ~0.8 kB of
    every rollout's fork of it) and still hands each rollout its own input."""

    from rlenv.spec import load_spec
    from rlenv.worker.config import WorkerConfig

    inputs = [{"id": f"q{n}", "prompt": f"say {n}", "answer": str(n)} for n in range(150)]
    inputs.insert(3, {"id": 1000, "prompt": "say 1000", "answer": "1000"})  # an integer id
    spec = env_builder.write(
        "def policy(messages, tools, ctx):\n    return messages[-1]['content'].split()[-1]\n",
        inputs=inputs,
    )
    with (spec.parent / "inputs.jsonl").open("a") as handle:
        handle.write("\n   \n")  # blank lines at the end are not records
    config = WorkerConfig(
        spec_path=str(spec),
        work_root=str(tmp_path / "work"),
        model_uri=f"python:{env_builder.module}:policy",
        loaded_spec=load_spec(spec),
    )
    seen = _probe(tmp_path, config, HELD_PROBE, spec.parent)
    assert seen == {"held": 0, "ids": [["q0", 0, "0"], ["q148", 149, "148"], ["q6", 7, "6"]]}


BAD_ARGUMENTS_PROBE = """
import json, sys, tempfile
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig

config = WorkerConfig(
    spec_path=sys.argv[1], work_root=tempfile.mkdtemp(), model_uri=sys.argv[2]
)
protocol.init_worker(config)
seen = []
for number in range(3):
    record = protocol.isolated("run_rollout", RolloutTask(number % 2, 0))
    seen.append([record["status"], record["messages"][-2]["content"], record["answer"]])
print(json.dumps(seen), file=sys.stderr)
"""

BAD_ARGUMENTS_POLICY = """
import json, sys

STARTED_WITH = []  # in the rollout's child: whether it was forked with jsonschema loaded

def tool(args, ctx):
    return "ok"

def policy(messages, tools, ctx):
    if messages[-1]["role"] == "tool":
        return "with jsonschema" if STARTED_WITH[0] else "without"
    STARTED_WITH.append("jsonschema" in sys.modules)
    arguments = {"term": 1} if ctx.input_id == "a" else {"term": "x"}
    call = {"name": "t", "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": call}]}
"""


def test_a_failed_call_has_the_worker_load_jsonschema_for_the_next_rollouts(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """Arguments that fail the plain check are worded by jsonschema, imported where the check
    ran (a rollout's child, which ends with it); the worker that grades that rollout then
    imports it, and has the template (which forks every child) import it too, before the next
    rollout's child is forked, so that the next such error costs no import."""
    parameters = {"type": "object", "properties": {"term": {"type": "string"}}}
    spec = env_builder.write(
        BAD_ARGUMENTS_POLICY,
        tools=[{"name": "t", "function": "MOD:tool", "parameters": parameters}],
    )
    seen = _loaded(spec, f"python:{env_builder.module}:policy", tmp_path, BAD_ARGUMENTS_PROBE)
    assert [status for status, _, _ in seen] == ["ok", "ok", "ok"]
    assert seen[0][1] == "error: invalid arguments: 1 is not of type 'string'"
    assert seen[1][1] == "ok"
    # the first rollout's check imported it in its child only; the template did before the next
    assert [started for _, _, started in seen] == ["without", "with jsonschema"] * 1 + [
        "with jsonschema"
    ]
