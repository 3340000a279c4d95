"""Issue 18 item 6: verifiers where they apply (`when:`), choosing inputs (--ids, --where),
metrics by an input field (--group-by), CSV inputs, and prompt templates with few-shot
examples."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EnvBuilder, cli, read_jsonl, sha256

# answers the last word of the last user message; says how many user turns it saw
POLICY = """
def policy(messages, tools, ctx):
    users = [m for m in messages if m["role"] == "user"]
    return users[-1]["content"].split()[-1]

def turns(messages, tools, ctx):
    return " | ".join(f"{m['role']}:{m['content']}" for m in messages)
"""

MIXED = [
    {"id": "d1", "prompt": "date 2025-03-14", "kind": "date", "answer": "2025-03-14"},
    {"id": "d2", "prompt": "date 2025-03-15", "kind": "date", "answer": "2025-03-15"},
    {"id": "n1", "prompt": "number 42", "kind": "number", "value": 42},
    {"id": "n2", "prompt": "number 7", "kind": "number", "value": 8},
]
VERIFIERS = [
    {
        "name": "date",
        "type": "regex",
        "pattern": r"\d{4}-\d{2}-\d{2}",
        "fullmatch": True,
        "when": {"field": "kind", "equals": "date"},
    },
    {
        "name": "exact",
        "type": "exact_match",
        "expected_field": "answer",
        "when": {"field": "answer"},
    },
    {"name": "value", "type": "numeric", "expected_field": "value", "when": {"field": "value"}},
]


def _mixed(env_builder: EnvBuilder) -> Path:
    return env_builder.write(POLICY, inputs=MIXED, verifiers=VERIFIERS, rollouts=1)


def test_verifiers_run_only_where_they_apply(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = _mixed(env_builder)
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"] == {"ok": 4}  # no verifier_error for a missing expected field
    records = {r["input_id"]: r for r in read_jsonl(out / "results.jsonl")}
    verdicts = {
        input_id: {v["name"]: (v["passed"], v["detail"]) for v in record["verifiers"]}
        for input_id, record in records.items()
    }
    assert verdicts["d1"]["value"] == (None, "not applicable")
    assert verdicts["d1"]["date"][0] is True and verdicts["d1"]["exact"][0] is True
    assert verdicts["n1"]["date"] == (None, "not applicable")
    assert verdicts["n1"]["exact"] == (None, "not applicable")
    assert verdicts["n1"]["value"][0] is True
    assert records["n2"]["passed"] is False and records["n1"]["passed"] is True
    assert summary["pass_rate"]["value"] == 0.75


def test_chosen_inputs_group_by_and_resume(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = _mixed(env_builder)
    full = tmp_path / "full"
    assert cli("run", str(spec), "--out", str(full), "--json").returncode == 0
    full_records = {r["input_id"]: r["digest"] for r in read_jsonl(full / "results.jsonl")}

    out = tmp_path / "chosen"
    base = ["run", str(spec), "--out", str(out), "--json", "--where", "kind=number"]
    done = cli(*base, "--group-by", "kind")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["inputs"] == 2 and summary["expected_rollouts"] == 2
    records = read_jsonl(out / "results.jsonl")
    # the same rollouts as in the full run, record for record
    assert {r["input_id"]: r["digest"] for r in records} == {
        key: full_records[key] for key in ("n1", "n2")
    }
    assert summary["groups"]["field"] == "kind"
    assert summary["groups"]["number"]["pass_rate"]["value"] == 0.5
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["select"] == {"ids": None, "where": {"kind": "number"}}
    assert cli("check", str(out)).returncode == 0  # indices 2 and 3 only: not a gap

    text = cli(
        "run", str(spec), "--out", str(tmp_path / "t"), "--ids", "d2,n1", "--group-by", "kind"
    )
    assert text.returncode == 0, text.stderr
    assert "kind=date: pass 1.000" in text.stdout and "kind=number: pass 1.000" in text.stdout

    # resume with another selection is refused; the same one continues
    changed = cli(*base[:-2], "--ids", "n1", "--resume")
    assert changed.returncode == 2 and "select" in changed.stderr
    again = cli(*base, "--resume")
    assert again.returncode == 0, again.stderr


def test_bad_selections_are_one_line(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = _mixed(env_builder)
    for extra, message in (
        (["--ids", "d1,zz"], "--ids: no input with id 'zz'"),
        (["--where", "kind=colour"], "--where kind=colour: no input matches"),
        (["--where", "kind"], "expected FIELD=VALUE"),
    ):
        out = tmp_path / extra[1]
        done = cli("run", str(spec), "--out", str(out), *extra)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], done.stderr
        assert not out.exists()


def test_csv_inputs(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(POLICY, rollouts=1)
    root = env_builder.root
    table = root / "inputs.csv"
    table.write_text('id,prompt,answer\na,say a,a\nb,"say, then b",b\n')
    document = json.loads(json.dumps(__import__("yaml").safe_load(spec.read_text())))
    document["inputs"] = {"path": "inputs.csv", "sha256": sha256(table)}
    spec.write_text(json.dumps(document))
    done = cli("run", str(spec), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pass_rate"]["value"] == 1.0

    table.write_text("id,prompt,answer\na,say a\n")
    document["inputs"]["sha256"] = sha256(table)
    spec.write_text(json.dumps(document))
    bad = cli("validate", str(spec))
    assert bad.returncode == 2 and "inputs.csv:2" in bad.stderr and "header has 3" in bad.stderr


def test_prompt_template_with_few_shot(env_builder: EnvBuilder, tmp_path: Path) -> None:
    inputs = [{"id": "x", "city": "Paris", "answer": "France"}]
    prompt = {
        "template": "Which country is {{ city }} in?",
        "few_shot": [{"input": {"city": "Rome"}, "answer": "Italy"}],
    }
    spec = env_builder.write(
        POLICY,
        inputs=inputs,
        policy="turns",
        prompt=prompt,
        system_prompt="Be brief.",
        verifiers=[{"type": "contains", "expected_field": "answer"}],
        rollouts=1,
    )
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    (record,) = read_jsonl(out / "results.jsonl")
    assert record["answer"] == (
        "system:Be brief. | user:Which country is Rome in? | assistant:Italy"
        " | user:Which country is Paris in?"
    )

    for template, message in (
        ("Where is {{ town }}?", "input 'x': prompt.template: 'town' is undefined"),
        ("{{ ''.__class__.__mro__ }}", "prompt.template"),
        ("{% if %}", "prompt.template"),
    ):
        document = __import__("yaml").safe_load(spec.read_text())
        document["prompt"] = {"template": template}
        spec.write_text(json.dumps(document))
        bad = cli("validate", str(spec))
        assert bad.returncode == 2, (template, bad.stdout)
        assert message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
