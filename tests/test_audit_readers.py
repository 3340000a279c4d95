"""Every reader verifies the same things (issue #26 item 4): `rlenv check`, report, compare,
grade, --resume and --baseline read a run through rlenv.audit.read_audited_run: each record's
digest recomputed, summary.json recomputed from the records and compared field by field, and
run.json against the digest sealed in summary.json. Each attack below was accepted before."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlenv.results import seal
from tests.conftest import EnvBuilder, cli

CODE = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]

def check(answer, data, ctx):
    if data["id"] == "b":
        raise ValueError("cannot grade b")
    return answer == data["answer"]

def reward(prompt, answer, ctx):
    return 0.25 + 0.5 * len(answer)
"""


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run with a reward model, an error row (a verifier that raises on b) and
    flags: every summary section an attack below edits is there."""
    root = tmp_path_factory.mktemp("readers")
    builder = EnvBuilder(root / "env")
    spec = builder.write(
        CODE,
        verifiers=[{"type": "python", "function": "MOD:check"}],
        reward_model={"function": f"{builder.module}:reward"},
    )
    out = root / "run"
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward"]["mean"] is not None and summary["errors"], summary
    return out


def _json_edit(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def attack(run: Path) -> None:
        document = json.loads((run / name).read_text())
        change(document)
        (run / name).write_text(json.dumps(document, indent=2))

    return attack


def _reward_mean(summary: dict[str, Any]) -> None:
    summary["reward"]["mean"] += 0.125


def _add_flag(summary: dict[str, Any]) -> None:
    summary["flags"].append({"name": "length_bias", "message": "forged", "value": 0.9})


def _drop_flags(summary: dict[str, Any]) -> None:
    summary["flags"] = []


def _errors_count(summary: dict[str, Any]) -> None:
    summary["errors"][0]["failed"] = 0


def _verdict(summary: dict[str, Any]) -> None:
    summary["verdict"]["verdict"] = "healthy"


def _outcome_digest(summary: dict[str, Any]) -> None:
    summary["outcome_digest"] = "0" * 64


def _model(meta: dict[str, Any]) -> None:
    meta["model"]["uri"] = "python:other:checkpoint"


def _fingerprint(meta: dict[str, Any]) -> None:
    meta["env"]["fingerprint"] = "f" * 64


def _model_both(meta: dict[str, Any]) -> None:
    """run.json and summary.json both claim another model; the seal still holds run.json."""
    _model(meta)


def _forge_verdict(run: Path) -> None:
    """Flip a verdict and recompute that record's own digest (a self-consistent record)."""
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["passed"] = not record["passed"]
    record["verifiers"][0]["passed"] = record["passed"]
    lines[0] = json.dumps(seal(record), sort_keys=True) + "\n"
    (run / "results.jsonl").write_text("".join(lines))


def _both(*attacks: Callable[[Path], None]) -> Callable[[Path], None]:
    def attack(run: Path) -> None:
        for one in attacks:
            one(run)

    return attack


ATTACKS: dict[str, tuple[Callable[[Path], None], str]] = {
    # attack -> what the one line must name
    "summary-reward-mean": (_json_edit("summary.json", _reward_mean), "reward.mean"),
    "summary-add-flag": (_json_edit("summary.json", _add_flag), "flags"),
    "summary-drop-flags": (_json_edit("summary.json", _drop_flags), "flags"),
    "summary-errors-count": (_json_edit("summary.json", _errors_count), "errors[0].failed"),
    "summary-verdict": (_json_edit("summary.json", _verdict), "verdict.verdict"),
    "summary-outcome-digest": (_json_edit("summary.json", _outcome_digest), "outcome_digest"),
    "run-json-model": (_json_edit("run.json", _model), "run.json"),
    "run-json-fingerprint": (_json_edit("run.json", _fingerprint), "run.json"),
    "run-json-and-summary-model": (
        _both(
            _json_edit("run.json", _model_both),
            _json_edit("summary.json", lambda s: s["model"].update(uri="python:other:checkpoint")),
        ),
        "run.json",
    ),
    "forged-verdict-resealed": (_forge_verdict, "digest"),
}


def _attacked(clean: Path, tmp_path: Path, attack: Callable[[Path], None]) -> Path:
    run = tmp_path / "run"
    shutil.copytree(clean, run)
    attack(run)
    return run


def _files(run: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(run.iterdir()) if path.is_file()}


def test_intact_run_is_read_by_every_reader(scored_run: Path, tmp_path: Path) -> None:
    result = cli("check", str(scored_run), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    copy = tmp_path / "copy"
    shutil.copytree(scored_run, copy)
    for command in (["report", str(copy)], ["compare", str(copy), str(copy), "--out", str(copy)]):
        result = cli(*command, "--json")
        assert result.returncode == 0, (command, result.stderr)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_check_names_the_first_field_that_differs(
    scored_run: Path, tmp_path: Path, name: str
) -> None:
    attack, where = ATTACKS[name]
    run = _attacked(scored_run, tmp_path, attack)
    result = cli("check", str(run))
    assert result.returncode == 1, (name, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0], result.stderr


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_report_compare_grade_refuse_what_check_refuses(
    scored_run: Path, tmp_path: Path, name: str
) -> None:
    attack, where = ATTACKS[name]
    run = _attacked(scored_run, tmp_path, attack)
    before = _files(run)
    out = tmp_path / "out"
    for command in (
        ["report", str(run)],
        ["compare", str(scored_run), str(run), "--out", str(out)],
        ["grade", str(run)],
    ):
        result = cli(*command)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, command, result.stdout, result.stderr)
        assert len(lines) == 1 and where in lines[0], (command, result.stderr)
        assert _files(run) == before and not out.exists(), "nothing written"


def test_resume_refuses_an_edited_record_up_front(scored_run: Path, tmp_path: Path) -> None:
    run = _attacked(scored_run, tmp_path, lambda _: None)
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["answer"] = "forged"
    (run / "results.jsonl").write_text("".join([json.dumps(record) + "\n", *lines[1:-1]]))
    before = _files(run)
    spec = json.loads((run / "run.json").read_text())["spec"]
    result = cli("run", spec, "--out", str(run), "--resume", "--json")
    assert result.returncode == 2 and "results.jsonl:1:" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _files(run) == before, "nothing written, no rollout run"


def test_baseline_is_sealed_and_read_again(scored_run: Path, tmp_path: Path) -> None:
    """A run judged against --baseline names it in run.json (path and digest); a reader
    judges it again against the same baseline, and refuses when the baseline changed."""
    baseline = tmp_path / "baseline"
    shutil.copytree(scored_run, baseline)
    spec = json.loads((scored_run / "run.json").read_text())["spec"]
    out = tmp_path / "judged"
    result = cli("run", spec, "--out", str(out), "--baseline", str(baseline))
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["baseline"]["run_dir"] == str(baseline)
    assert cli("check", str(out)).returncode == 0
    _json_edit("summary.json", _verdict)(baseline)
    result = cli("check", str(out))
    assert result.returncode == 1 and "baseline" in result.stderr, result.stderr


# ----------------------------------------------------------------- the same outcome elsewhere


def _rewritten(run: Path, out: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``run`` whose records went through ``change`` and were sealed again, with
    its summary rebuilt and run.json sealed: an intact run (as another machine would write
    it), not a tampered one."""
    from rlenv.audit import recompute_summary, seal_run_json
    from rlenv.results import ResultsWriter

    shutil.copytree(run, out)
    lines = (out / "results.jsonl").read_text().splitlines()
    records = []
    for line in lines:
        record = json.loads(line)
        change(record)
        records.append(seal(record))
    (out / "results.jsonl").unlink()
    writer = ResultsWriter(out / "results.jsonl")
    for record in records:
        writer.write(record)
    writer.close()
    meta = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    summary = recompute_summary(out, meta, summary, records)
    (out / "summary.json").write_text(json.dumps(seal_run_json(summary, out)))
    assert cli("check", str(out)).returncode == 0
    return out


def _nudge(factor: float) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        if record["input_id"] == "b" and record["rollout"] == 1:
            record["reward"] *= factor

    return change


def test_against_itself_and_a_rerun_same_outcomes(scored_run: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    spec = json.loads((scored_run / "run.json").read_text())["spec"]
    assert cli("run", spec, "--out", str(again)).returncode == 0
    result = cli("check", str(scored_run), "--against", str(again))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "same outcomes; scores within 1e-6"
    summary = json.loads((again / "summary.json").read_text())
    assert summary["outcome_digest"] in result.stdout


def test_against_scores_within_the_tolerance(scored_run: Path, tmp_path: Path) -> None:
    """Another machine's reward model scores 1e-9 apart: same outcomes, digests differ."""
    other = _rewritten(scored_run, tmp_path / "other", _nudge(1 + 1e-9))
    mine = json.loads((scored_run / "summary.json").read_text())
    theirs = json.loads((other / "summary.json").read_text())
    assert mine["digest"] != theirs["digest"]
    assert mine["outcome_digest"] == theirs["outcome_digest"]
    result = cli("check", str(scored_run), "--against", str(other), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["message"] == "same outcomes; scores within 1e-6"


def test_against_names_a_score_beyond_the_tolerance(scored_run: Path, tmp_path: Path) -> None:
    other = _rewritten(scored_run, tmp_path / "other", _nudge(1 + 1e-4))
    result = cli("check", str(scored_run), "--against", str(other))
    assert result.returncode == 1
    assert result.stderr.startswith(
        "rlenv: error: same outcomes; scores differ by more than 1e-6 at input 'b' rollout 1:"
        " reward ("
    ), result.stderr


def test_against_names_the_first_outcome_difference(scored_run: Path, tmp_path: Path) -> None:
    def answer(record: dict[str, Any]) -> None:
        if record["rollout"] == 1:
            record["answer"] = "other"

    other = _rewritten(scored_run, tmp_path / "other", answer)
    result = cli("check", str(scored_run), "--against", str(other), "--json")
    assert result.returncode == 1
    found = json.loads(result.stdout)["difference"]
    assert (found["kind"], found["input_id"], found["rollout"]) == ("outcome", "a", 1)
    assert found["field"] == "answer"
    assert "outcomes differ at input 'a' rollout 1: answer" in result.stderr


def test_against_refuses_a_tampered_run(scored_run: Path, tmp_path: Path) -> None:
    run = _attacked(scored_run, tmp_path, _json_edit("summary.json", _reward_mean))
    result = cli("check", str(scored_run), "--against", str(run))
    assert result.returncode == 1 and "reward.mean" in result.stderr, result.stderr
