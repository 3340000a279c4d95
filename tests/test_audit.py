"""A digest that is earned: every reader of a run directory recomputes each record's digest
from its content and refuses tampered, duplicated or missing records; `rlenv check` says so."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rlenv.results import seal
from tests.conftest import EnvBuilder, cli

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("integrity")
    spec = EnvBuilder(root / "env").write(POLICY)
    out = root / "run"
    result = cli("run", str(spec), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return out


def _lines(run: Path) -> list[str]:
    return (run / "results.jsonl").read_text().splitlines(keepends=True)


def _edit_record(index: int, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def attack(run: Path) -> None:
        lines = _lines(run)
        record = json.loads(lines[index])
        change(record)
        lines[index] = json.dumps(record, sort_keys=True) + "\n"
        (run / "results.jsonl").write_text("".join(lines))

    return attack


def _flip(record: dict) -> None:
    record["passed"] = not record["passed"]


def _answer(record: dict) -> None:
    record["answer"] = "forged"


def _duplicate(run: Path) -> None:
    lines = _lines(run)
    (run / "results.jsonl").write_text("".join([*lines, lines[0]]))


def _delete(run: Path) -> None:
    lines = _lines(run)
    (run / "results.jsonl").write_text("".join(lines[:1] + lines[2:]))


def _forge_dup(run: Path) -> None:
    """A self-consistent record (re-sealed) for an (input, rollout) already present."""
    lines = _lines(run)
    record = json.loads(lines[0])
    record["passed"], record["answer"] = (not record["passed"]), "forged"
    (run / "results.jsonl").write_text("".join([*lines, json.dumps(seal(record)) + "\n"]))


def _forge_extra_rollout(run: Path) -> None:
    """A self-consistent record for a rollout index the run never had."""
    lines = _lines(run)
    record = json.loads(lines[0])
    record["rollout"] = 7
    (run / "results.jsonl").write_text("".join([*lines, json.dumps(seal(record)) + "\n"]))


def _forge_replace(run: Path) -> None:
    """Replace a record by a self-consistent forged one: caught by summary.json's digest."""
    lines = _lines(run)
    record = json.loads(lines[0])
    record["passed"], record["answer"] = (not record["passed"]), "forged"
    lines[0] = json.dumps(seal(record)) + "\n"
    (run / "results.jsonl").write_text("".join(lines))


def _forge_replace_and_summary(run: Path) -> None:
    """Forged record plus a summary.json with the new digest: numbers no longer match."""
    _forge_replace(run)
    summary = json.loads((run / "summary.json").read_text())
    from rlenv.results import iter_results, run_digest

    summary["digest"] = run_digest(iter_results(run / "results.jsonl"))
    (run / "summary.json").write_text(json.dumps(summary))


def _drop_input(run: Path) -> None:
    """Remove every rollout of one input (no gap within an input; a missing input)."""
    lines = [line for line in _lines(run) if json.loads(line)["input_id"] != "b"]
    (run / "results.jsonl").write_text("".join(lines))


def _summary_pass_rate(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary["pass_rate"]["value"] = 0.25
    (run / "summary.json").write_text(json.dumps(summary))


def _summary_counts(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary["counts"] = {"ok": 3, "timeout": 1}
    (run / "summary.json").write_text(json.dumps(summary))


def _no_digest(run: Path) -> None:
    _edit_record(0, lambda record: record.pop("digest"))(run)


def _no_run_json(run: Path) -> None:
    (run / "run.json").unlink()


RECORD_ATTACKS = {
    "flip-verdict": (_edit_record(1, _flip), ":2:"),
    "edit-answer": (_edit_record(0, _answer), ":1:"),
    "drop-digest": (_no_digest, ":1:"),
    "duplicate-line": (_duplicate, ":5:"),
    "delete-line": (_delete, "missing"),
    "forged-duplicate": (_forge_dup, ":5:"),
    "forged-extra-rollout": (_forge_extra_rollout, ":5:"),
    "drop-input": (_drop_input, "missing"),
}
SUMMARY_ATTACKS = {
    "forged-record": (_forge_replace, "digest"),
    "forged-record-and-summary-digest": (_forge_replace_and_summary, "summary.json"),
    "summary-pass-rate": (_summary_pass_rate, "pass_rate"),
    "summary-counts": (_summary_counts, "counts"),
    "no-run-json": (_no_run_json, "run.json"),
}


def _attacked(clean_run: Path, tmp_path: Path, attack: Callable[[Path], None]) -> Path:
    run = tmp_path / "run"
    shutil.copytree(clean_run, run)
    attack(run)
    return run


def test_intact_run_checks_clean(clean_run: Path) -> None:
    result = cli("check", str(clean_run), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == [] and report["records"] == 4


def test_reordered_lines_change_nothing(clean_run: Path, tmp_path: Path) -> None:
    """Lines are written in completion order; reordering them changes no number or digest."""
    run = _attacked(
        clean_run,
        tmp_path,
        lambda r: (r / "results.jsonl").write_text("".join(reversed(_lines(r)))),
    )
    assert cli("check", str(run)).returncode == 0
    result = cli("report", str(run), "--json")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted({**RECORD_ATTACKS, **SUMMARY_ATTACKS}))
def test_check_catches_tampering(clean_run: Path, tmp_path: Path, name: str) -> None:
    attack, where = {**RECORD_ATTACKS, **SUMMARY_ATTACKS}[name]
    run = _attacked(clean_run, tmp_path, attack)
    result = cli("check", str(run), "--json")
    assert result.returncode == 1, (name, result.stdout, result.stderr)
    assert where in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["ok"] is False


@pytest.mark.parametrize("name", sorted(RECORD_ATTACKS))
def test_readers_refuse_tampered_records(clean_run: Path, tmp_path: Path, name: str) -> None:
    attack, where = RECORD_ATTACKS[name]
    run = _attacked(clean_run, tmp_path, attack)
    for command in (["report", str(run)], ["compare", str(clean_run), str(run)]):
        result = cli(*command, "--json")
        assert result.returncode == 2, (name, command, result.stderr)
        assert "results.jsonl" in result.stderr and "Traceback" not in result.stderr


def test_grade_refuses_tampered_records(clean_run: Path, tmp_path: Path) -> None:
    run = _attacked(clean_run, tmp_path, _edit_record(1, _flip))
    before = (run / "summary.json").read_bytes()
    result = cli("grade", str(run))
    assert result.returncode == 2 and "results.jsonl:2:" in result.stderr, result.stderr
    assert (run / "summary.json").read_bytes() == before, "nothing overwritten"


def test_summary_refuses_tampered_records(clean_run: Path, tmp_path: Path) -> None:
    """build_summary (run --resume ends with it) recomputes each record's digest too."""
    run = _attacked(clean_run, tmp_path, _edit_record(0, _answer))
    spec = json.loads((run / "run.json").read_text())["spec"]
    result = cli("run", spec, "--out", str(run), "--resume")
    assert result.returncode == 2 and "results.jsonl:1:" in result.stderr, result.stderr
