"""A frozen-world worker reads its spec as records (`rlenv.spec_data`) and never imports
pydantic nor `rlenv.spec` (issue 30: their heap, ~9 MB, was shared by every worker's template
and call children, and counted in every run's peak once per worker). The records must behave
as the models they mirror wherever the worker reads them."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from rlenv.grade_cache import verifier_identity
from rlenv.spec import load_spec
from tests.conftest import EnvBuilder, cli, lookup_cassette, probe_report, read_jsonl

API = "http://api.example.test"

CODE = """
import json, sys

import httpx

WATCHED = ("pydantic", "pydantic_core", "rlenv.spec", "rlenv.spec_user", "rlenv.spec_base")


def loaded():
    return [name for name in WATCHED if name in sys.modules]


def lookup(args, ctx):
    return httpx.get("API/v1/lookup").json()


def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"name": "lookup", "arguments": json.dumps({"term": "x"})}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": call}]}
    kind = json.loads(messages[-1]["content"])["kind"]
    return json.dumps({"n": 42, "kind": kind, "loaded": loaded()})


def verify(answer, input, ctx):  # graded in the worker itself
    return not loaded(), "worker loaded: " + ",".join(loaded())
""".replace("API", API)

GOLD = json.dumps({"n": 42, "kind": "fruit", "loaded": []})

VERIFIERS = [
    {"name": "exact", "type": "exact_match", "expected_field": "answer", "normalize": []},
    {"name": "regex", "type": "regex", "pattern": r'"loaded": \[\]'},
    {"name": "numeric", "type": "numeric", "expected": 42},
    {"name": "contains", "type": "contains", "all": ['"kind": "fruit"'], "none": ["pydantic"]},
    {
        "name": "shape",
        "type": "json_schema",
        "schema": {"type": "object", "properties": {"loaded": {"type": "array", "maxItems": 0}}},
    },
    {
        "name": "worker",
        "type": "python",
        "function": "MOD:verify",
        "when": {"field": "kind", "equals": None},  # set to null: applies to a null field only
    },
    {"name": "worker2", "type": "python", "function": "MOD:verify", "when": {"field": "kind"}},
]


def _spec(env_builder: EnvBuilder) -> Path:
    env_builder.root.mkdir(parents=True, exist_ok=True)
    cassette = lookup_cassette(env_builder.root / "lookup.yaml", API)
    return env_builder.write(
        CODE,
        inputs=[
            {"id": "a", "prompt": "look x up", "answer": GOLD, "kind": "x"},
            {"id": "b", "prompt": "look x up", "answer": GOLD},
        ],
        tools=[{"name": "lookup", "function": "MOD:lookup", "cassette": {"path": cassette.name}}],
        verifiers=VERIFIERS,
        rollouts=1,
    )


def test_a_local_worker_imports_neither_pydantic_nor_the_spec_models(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    """A real `rlenv run`: the policy (in a call's child, forked from the worker's template)
    and a python verifier (in the worker) report what the worker has loaded; every kind of
    builtin verifier and a `when:` (which reads the fields the user set) grade as they did."""
    spec = _spec(env_builder)
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json", "--workers", "1", cwd=spec.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    records = {record["input_id"]: record for record in read_jsonl(out / "results.jsonl")}
    assert [records[key]["status"] for key in "ab"] == ["ok", "ok"], done.stderr[-3000:]
    assert records["a"]["answer"] == GOLD, records["a"]["answer"]
    verdicts = {key: {v["name"]: v["passed"] for v in records[key]["verifiers"]} for key in "ab"}
    builtin = {"exact": True, "regex": True, "numeric": True, "contains": True, "shape": True}
    assert verdicts["a"] == {**builtin, "worker": None, "worker2": True}
    assert verdicts["b"] == {**builtin, "worker": None, "worker2": None}
    detail = {v["name"]: v["detail"] for v in records["a"]["verifiers"]}
    assert detail["worker2"] == "worker loaded: "


def test_records_behave_as_the_models_they_mirror(env_builder: EnvBuilder) -> None:
    from rlenv.spec_data import LoadedData, Record, as_data

    loaded = load_spec(_spec(env_builder))
    data = as_data(loaded)
    assert isinstance(data, LoadedData) and as_data(data) is data
    sent = pickle.loads(pickle.dumps(data))
    for same in (data, sent):
        assert same.spec == data.spec and same.path == loaded.path and same.root == loaded.root
        assert same.inputs_path == loaded.inputs_path
        assert same.python_paths() == loaded.python_paths()
        tool, model_tool = same.spec.tools[0], loaded.spec.tools[0]
        assert same.cassette_path(tool) == loaded.cassette_path(model_tool)
        assert same.spec.time == loaded.spec.time
        assert same.spec.time.isoformat() == loaded.spec.time.isoformat()
        assert same.spec.time.tzname() == loaded.spec.time.tzname()
        assert dict(same.spec.decoding) == dict(loaded.spec.decoding)
        for record, model in zip(same.spec.verifiers, loaded.spec.verifiers, strict=True):
            assert record.label == model.label
            assert record.model_fields_set == model.model_fields_set
            if model.when is not None:
                for row in ({"kind": None}, {"kind": "x"}, {}, {"other": 1}):
                    assert record.when.applies(row) == model.when.applies(row)
    assert data.spec.model_dump() == loaded.spec.model_dump()  # every field, nested ones too
    # `equals: null` set by the user differs from no `equals` at all
    unset, nulled = data.spec.verifiers[-1].when, data.spec.verifiers[-2].when
    assert isinstance(unset, Record) and unset.applies({"kind": 1})
    assert not nulled.applies({"kind": 1})


def test_an_expensive_verifiers_record_keys_the_grader_cache_as_its_model(
    env_builder: EnvBuilder,
) -> None:
    from rlenv.spec_data import as_data

    spec = env_builder.write(
        "def verify(answer, input, ctx):\n    return True\n",
        verifiers=[
            {"type": "python", "function": "MOD:verify", "cost": "expensive", "options": {"k": 1}}
        ],
    )
    model = load_spec(spec).spec.verifiers[0]
    record = pickle.loads(pickle.dumps(as_data(model)))
    assert verifier_identity(record, "abc") == verifier_identity(model, "abc")


UNSENT_PROBE = """
import json, sys, tempfile
from rlenv.worker import protocol
from rlenv.worker.config import RolloutTask, WorkerConfig

config = WorkerConfig(spec_path=sys.argv[1], work_root=tempfile.mkdtemp(), model_uri=sys.argv[2])
protocol.init_worker(config)
record = protocol.handle("run_rollout", RolloutTask(0, 0))
runtime = protocol._get()
kinds = [type(runtime.loaded).__name__, type(runtime.loaded.spec.verifiers[-1].when).__name__]
print(json.dumps({"status": record["status"], "kinds": kinds}), file=sys.stderr)
"""


def test_a_worker_that_loads_its_spec_itself_reads_it_as_records(env_builder: EnvBuilder) -> None:
    """A worker not sent its spec (a Ray actor, an unpacked bundle) loads it, with pydantic,
    and reads it as records all the same: one code path in the world."""
    spec = _spec(env_builder)
    model = f"python:{env_builder.module}:policy"
    seen = probe_report(["-c", UNSENT_PROBE, str(spec), model], spec.parent)
    assert seen == {"status": "ok", "kinds": ["LoadedData", "WhenRecord"]}


def test_a_records_fields_are_plain_attributes(
    env_builder: EnvBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker reads spec fields at every rollout: a record's fields are its own attributes,
    read as a pydantic model's are, never through `__getattr__` (a fallback over a dict cost
    ~450 ns a read, ~15x a plain attribute's); only a name that is no field reaches it."""
    from rlenv.spec_data import Record, as_data

    data = as_data(load_spec(_spec(env_builder)))
    fallbacks: list[str] = []
    fallback = Record.__getattr__

    def counted(self: Record, name: str) -> object:
        fallbacks.append(name)
        return fallback(self, name)

    monkeypatch.setattr(Record, "__getattr__", counted)
    for record in (data.spec, data.spec.limits, data.spec.tools[0], *data.spec.verifiers):
        for name, value in record:
            assert getattr(record, name) is value
    assert fallbacks == []
    with pytest.raises(AttributeError, match="record has no attribute 'no_such_field'"):
        data.spec.no_such_field  # noqa: B018
    assert fallbacks == ["no_such_field"]
    with pytest.raises(AttributeError, match="frozen"):
        data.spec.seed = 2
