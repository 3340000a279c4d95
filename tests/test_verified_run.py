"""The one reader of a run directory (rlenv.audit_reader.read_audited_run) and `rlenv check`'s
library side (rlenv.audit), in process, on a run directory written here with the functions
`rlenv run` writes it with (sealed records, `build_summary`, `seal_run_json`). Each edit a
tamperer could make is one TamperedRun naming the file and the field; an intact run is read
as written. The mutation run's fast set for rlenv/audit_reader.py and rlenv/audit.py
(tests/test_audit_readers.py runs the same promises through the CLI on a real run)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlenv.audit import AgainstResult, AuditResult, audit_against, audit_run
from rlenv.audit_reader import (
    brief,
    read_audited_run,
    read_baseline,
    recompute_summary,
    run_json_digest,
    seal_run_json,
)
from rlenv.audit_records import TamperedRun
from rlenv.errors import UserError
from rlenv.results import encode_line, run_digest, run_outcome_digest, seal
from rlenv.summary import build_summary, judges_block

FINGERPRINT = "f" * 64
DROP = object()  # a run.json field left out (run.json written by an older rlenv)


def rollouts(rewards: tuple[float, ...] = (1.0, 0.0, 0.5, 0.25)) -> list[dict[str, Any]]:
    """Two inputs × two rollouts, sealed as a worker seals them."""
    records = []
    for n, reward in enumerate(rewards):
        index, rollout = divmod(n, 2)
        records.append(
            seal(
                {
                    "input_id": "ab"[index],
                    "input_index": index,
                    "rollout": rollout,
                    "seed": n,
                    "answer": f"answer {n}",
                    "passed": reward > 0.4,
                    "reward": reward,
                    "status": "ok",
                    "error": None,
                    "verifiers": [
                        {"name": "v", "type": "exact_match", "passed": reward > 0.4, "score": 1.0}
                    ],
                }
            )
        )
    return records


def write_run(
    run: Path,
    records: list[dict[str, Any]] | None = None,
    *,
    baseline: Path | None = None,
    **meta_fields: Any,
) -> Path:
    """A run directory as `rlenv run` leaves it."""
    records = rollouts() if records is None else records
    run.mkdir(parents=True)
    meta: dict[str, Any] = {
        "env": {"name": "t", "version": 1, "fingerprint": FINGERPRINT},
        "model": {"uri": "python:policy"},
        "decoding": {"temperature": 0, "seed": 0},
        "rollouts_per_input": 2,
        "inputs": 2,
        "limit": None,
        **meta_fields,
    }
    for name in [name for name, value in meta.items() if value is DROP]:
        del meta[name]
    baseline_records = None
    if baseline is not None:
        baseline_records = read_baseline(baseline, FINGERPRINT)
        meta["baseline"] = baseline_records.source
    (run / "results.jsonl").write_bytes(b"".join(encode_line(r) + b"\n" for r in records))
    (run / "run.json").write_text(json.dumps(meta, indent=2))
    prepared = SimpleNamespace(inputs=[SimpleNamespace(id=None, data={})] * 2)
    summary = build_summary(
        prepared,
        {"limit": None, **meta},
        records,
        "python:policy",
        str(run / "results.jsonl"),
        baseline=baseline_records,
    )
    judged = judges_block(meta, run)  # as `rlenv run` adds it
    if judged is not None:
        summary["judges"] = judged
    (run / "summary.json").write_text(json.dumps(seal_run_json(summary, run), indent=2))
    return run


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refused(run: Path) -> str:
    with pytest.raises(TamperedRun) as caught:
        read_audited_run(run)
    return str(caught.value)


def test_an_intact_run_is_read_as_written(run: Path) -> None:
    verified = read_audited_run(run)
    assert verified.run_dir == run
    assert verified.records == rollouts()
    assert verified.meta == json.loads((run / "run.json").read_text())
    assert verified.summary == json.loads((run / "summary.json").read_text())
    assert verified.summary["digest"] == run_digest(rollouts())
    checked = audit_run(run)
    assert checked.ok and checked.problems == []
    assert checked.as_dict() == {
        "run_dir": str(run),
        "ok": True,
        "records": 4,
        "digest": run_digest(rollouts()),
        "outcome_digest": run_outcome_digest(rollouts()),
        "problems": [],
    }
    assert read_audited_run(str(run)).records == verified.records  # a str path too


def test_a_record_edited_is_named_by_its_line(run: Path) -> None:
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    record = json.loads(lines[2])
    record["passed"] = not record["passed"]
    lines[2] = json.dumps(record) + "\n"
    (run / "results.jsonl").write_text("".join(lines))
    message = refused(run)
    assert message.startswith(f"{run / 'results.jsonl'}:3: record ('b', rollout 0)")
    result = audit_run(run)
    assert not result.ok and result.problems == [message]
    assert result.records == 0 and result.digest is None


def test_a_forged_record_resealed_changes_the_digest_first(run: Path) -> None:
    records = rollouts()
    records[0] = seal({**records[0], "answer": "forged"})
    (run / "results.jsonl").write_bytes(b"".join(encode_line(r) + b"\n" for r in records))
    message = refused(run)
    assert message.startswith(f"{run / 'summary.json'}: digest is ")
    assert (
        "in summary.json but" in message and "recomputed from results.jsonl and run.json" in message
    )


@pytest.mark.parametrize(
    ("field", "change", "named"),
    [
        ("pass_rate", lambda s: s["pass_rate"].update(value=0.25), "pass_rate.value is 0.25"),
        ("counts", lambda s: s.update(counts={"ok": 3, "timeout": 1}), "counts"),
        ("reward", lambda s: s["reward"].update(mean=9.0), "reward.mean is 9.0"),
        ("verdict", lambda s: s.update(verdict="healthy"), 'verdict is "healthy"'),
        ("rollouts", lambda s: s.update(rollouts=5), "rollouts is 5"),
        ("extra", lambda s: s.update(planted=1), 'planted is 1 in summary.json but "<missing>"'),
        ("dropped", lambda s: s.pop("usage"), 'usage is "<missing>" in summary.json'),
    ],
)
def test_an_edited_summary_names_the_field(run: Path, field: str, change: Any, named: str) -> None:
    edit(run / "summary.json", change)
    message = refused(run)
    assert message.startswith(f"{run / 'summary.json'}: {named}"), message


def test_unrecomputed_fields_may_differ(run: Path) -> None:
    edit(run / "summary.json", lambda s: s.update(rlenv_version="0.0.1", groups={"x": 1}))
    assert read_audited_run(run).summary["rlenv_version"] == "0.0.1"


def test_run_json_is_sealed(run: Path) -> None:
    assert json.loads((run / "summary.json").read_text())["run_json_digest"] == run_json_digest(run)
    (run / "run.json").write_text(json.dumps(json.loads((run / "run.json").read_text())))
    read_audited_run(run)  # whitespace is not content
    edit(run / "run.json", lambda m: m["model"].update(uri="python:other"))
    assert refused(run) == f"{run / 'run.json'}: does not match the digest sealed in summary.json"
    edit(run / "summary.json", lambda s: s.pop("run_json_digest"))
    assert refused(run) == (
        f"{run / 'run.json'}: summary.json holds no seal of run.json (run.json's digest)"
    )


def test_missing_files_and_bad_json(run: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError) as caught:
        read_audited_run(tmp_path / "nowhere")
    assert str(caught.value) == f"{tmp_path / 'nowhere'}: not a run directory (no results.jsonl)"
    with pytest.raises(UserError, match=r"0: not a run directory \(no results.jsonl\)"):
        read_audited_run(tmp_path)  # a directory, but no results.jsonl in it
    (run / "summary.json").rename(tmp_path / "summary.json")
    assert refused(run) == (
        f"{run / 'summary.json'}: missing (a run that did not finish: --resume it)"
    )
    (run / "run.json").unlink()
    assert refused(run) == f"{run / 'run.json'}: missing"
    (tmp_path / "summary.json").rename(run / "summary.json")
    (run / "run.json").write_text("[1]")
    with pytest.raises(UserError, match=r"run.json: not a JSON object"):
        read_audited_run(run)
    (run / "run.json").write_text("{oops")
    with pytest.raises(UserError, match=r"run.json: not readable JSON"):
        read_audited_run(run)
    with pytest.raises(UserError, match="not a run directory"):
        audit_run(tmp_path / "nowhere")


def test_a_gap_is_refused_but_resumable(tmp_path: Path) -> None:
    records = rollouts()
    run = write_run(tmp_path / "run", records)
    (run / "results.jsonl").write_bytes(
        b"".join(encode_line(r) + b"\n" for r in records[:3]) + b'{"input_id": "b", "rol'
    )
    assert refused(run).endswith("input 'b' is missing rollout 1 (1 of 2 missing)")
    resumed = read_audited_run(run, resume=True)
    assert resumed.records == records[:3] and resumed.summary == {}
    assert resumed.run_dir == run and resumed.meta == json.loads((run / "run.json").read_text())
    assert (run / "results.jsonl").read_bytes().endswith(b"\n")  # the torn line cut off
    (run / "summary.json").unlink()  # an interrupted run has none
    assert read_audited_run(run, resume=True).records == records[:3]


def test_resume_still_checks_each_record(tmp_path: Path) -> None:
    records = rollouts()
    run = write_run(tmp_path / "run", records)
    (run / "results.jsonl").write_bytes(
        b"".join(encode_line(r) + b"\n" for r in [records[0], {**records[1], "answer": "edited"}])
    )
    with pytest.raises(TamperedRun) as caught:
        read_audited_run(run, resume=True)
    assert str(caught.value).startswith(f"{run / 'results.jsonl'}:2: record ('a', rollout 1)")
    extra = seal({**records[0], "rollout": 2})  # outside the 2 rollouts per input run.json holds
    (run / "results.jsonl").write_bytes(encode_line(extra) + b"\n")
    with pytest.raises(TamperedRun, match="outside the run's 2 rollouts per input"):
        read_audited_run(run, resume=True)
    index = seal({**records[0], "input_index": 2})  # outside its 2 inputs
    (run / "results.jsonl").write_bytes(encode_line(index) + b"\n")
    with pytest.raises(TamperedRun, match="outside the run's 2 inputs"):
        read_audited_run(run, resume=True)
    edit(run / "run.json", lambda m: m.update(rollouts_per_input=True))  # a bool is no count
    (run / "results.jsonl").write_bytes(encode_line(extra) + b"\n")
    assert read_audited_run(run, resume=True).records == [extra]
    edit(run / "run.json", lambda m: m.update(input_indices=["x"]))
    with pytest.raises(TamperedRun, match="run.json: input_indices is not a list of integers"):
        read_audited_run(run, resume=True)


def test_a_summary_from_foreign_records_is_named(run: Path) -> None:
    edit(run / "run.json", lambda m: m.pop("decoding"))
    edit(run / "summary.json", lambda s: s.update(run_json_digest=run_json_digest(run)))
    assert refused(run).startswith(f"{run / 'run.json'}: not an rlenv run record (KeyError:")


def test_inputs_count_comes_from_run_json_or_the_summary(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    records = rollouts()
    assert recompute_summary(run, meta, summary, records)["digest"] == summary["digest"]
    del meta["inputs"]  # older run.json: the summary's expected rollouts say how many
    assert recompute_summary(run, meta, summary, records)["expected_rollouts"] == 4
    meta["input_indices"] = [0, 1]
    assert recompute_summary(run, meta, summary, records)["expected_rollouts"] == 4
    with pytest.raises(TamperedRun, match="input index 1 is missing"):
        recompute_summary(run, {**meta, "input_indices": None, "inputs": 3}, summary, records[:2])


def test_a_baseline_is_read_again_and_must_keep_its_digest(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", rollouts((0.0, 0.0, 0.0, 0.0)))
    records = read_baseline(base, FINGERPRINT)
    assert len(records) == 4
    assert records.source == {
        "run_dir": str(base),
        "digest": json.loads((base / "summary.json").read_text())["digest"],
    }
    assert len(read_baseline(base, None)) == 4
    run = write_run(tmp_path / "run", baseline=base)
    assert read_audited_run(run).meta["baseline"] == records.source
    with pytest.raises(UserError) as caught:
        read_baseline(base, "0123456789abcdef" * 4)
    assert str(caught.value) == (
        f"--baseline {base}: env fingerprint ffffffffffff differs from the run's 0123456789ab"
        " (a baseline must be the same env)"
    )
    with pytest.raises(UserError, match="--baseline .*: no results.jsonl, not a run directory"):
        read_baseline(tmp_path / "nowhere", FINGERPRINT)
    # the baseline edited after the run was judged against it
    edit(base / "summary.json", lambda s: s["pass_rate"].update(value=0.9))
    message = refused(run)
    assert message.startswith(f"{run / 'run.json'}: the run was judged against a baseline")
    assert "pass_rate.value" in message
    with pytest.raises(UserError, match="^--baseline "):
        read_baseline(base, FINGERPRINT)


def test_a_baseline_replaced_by_another_intact_run_is_named(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", rollouts((0.0, 0.0, 0.0, 0.0)))
    run = write_run(tmp_path / "run", baseline=base)
    old = json.loads((base / "summary.json").read_text())["digest"]
    (tmp_path / "base").rename(tmp_path / "old")
    write_run(tmp_path / "base", rollouts((1.0, 1.0, 1.0, 1.0)))
    new = json.loads((base / "summary.json").read_text())["digest"]
    assert refused(run) == (
        f"{run / 'run.json'}: its baseline {base} has digest {new[:12]}, not the {old[:12]}"
        " the run was judged against"
    )


def test_a_baseline_that_is_not_one_or_names_itself(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", baseline=None, baseline_placeholder=None)
    for bad in ("x", {"digest": "d"}, {"run_dir": 3}):
        edit(run / "run.json", lambda m, bad=bad: m.update(baseline=bad))
        edit(run / "summary.json", lambda s: s.update(run_json_digest=run_json_digest(run)))
        assert refused(run) == f"{run / 'run.json'}: baseline is not {{run_dir, digest}}"
    edit(run / "run.json", lambda m: m.update(baseline={"run_dir": str(run), "digest": "d"}))
    edit(run / "summary.json", lambda s: s.update(run_json_digest=run_json_digest(run)))
    assert refused(run) == (
        f"{run / 'run.json'}: the run was judged against a baseline that cannot be read again:"
        f" --baseline {run / 'run.json'}: baseline {run.resolve()} is its own baseline"
    )


def test_brief_keeps_a_value_short() -> None:
    assert brief("short") == '"short"'
    assert brief("x" * 38) == '"' + "x" * 38 + '"'  # 40 characters: kept whole
    assert brief("x" * 39) == '"' + "x" * 36 + "..."
    assert brief({"é": Path("p")}) == '{"é": "p"}'


def test_against_itself_and_a_score_or_an_outcome_apart(tmp_path: Path) -> None:
    mine = write_run(tmp_path / "a")
    same = audit_against(mine, write_run(tmp_path / "b"))
    assert isinstance(same, AgainstResult) and same.ok
    assert same.message == "same outcomes; scores within 1e-6"
    assert same.outcome_digests == (run_outcome_digest(rollouts()),) * 2
    assert same.as_dict() == {
        "run_dir": str(mine),
        "against": str(tmp_path / "b"),
        "ok": True,
        "message": "same outcomes; scores within 1e-6",
        "outcome_digests": [run_outcome_digest(rollouts())] * 2,
        "tolerance": 1e-6,
        "difference": None,
    }
    near = audit_against(mine, write_run(tmp_path / "c", rollouts((1.0, 0.0, 0.5, 0.2500001))))
    assert near.ok
    far = audit_against(mine, write_run(tmp_path / "d", rollouts((1.0, 0.0, 0.5, 0.26))))
    assert not far.ok
    assert far.message == (
        "same outcomes; scores differ by more than 1e-6 at input 'b' rollout 1: reward"
        " (0.25 vs 0.26)"
    )
    flipped = rollouts()
    flipped[1] = seal({**flipped[1], "answer": "other"})
    apart = audit_against(mine, write_run(tmp_path / "e", flipped))
    assert not apart.ok and apart.as_dict()["ok"] is False
    assert apart.message == (
        'outcomes differ at input \'a\' rollout 1: answer ("answer 1" vs "other")'
    )
    assert apart.outcome_digests[0] != apart.outcome_digests[1]


def test_check_result_ok_only_without_problems() -> None:
    assert AuditResult("r").ok
    assert not AuditResult("r", problems=["x"]).ok


def test_a_run_json_from_an_older_rlenv_is_read(tmp_path: Path) -> None:
    """run.json without `inputs` (the count comes from the summary) or `limit`."""
    run = write_run(tmp_path / "run", inputs=DROP, limit=DROP)
    assert read_audited_run(run).records == rollouts()
    resumed = read_audited_run(run, resume=True)
    assert resumed.records == rollouts()


def test_a_grouped_run_is_read(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", group_by="topic")
    assert read_audited_run(run).meta["group_by"] == "topic"


def test_the_whole_message_of_a_summary_field(run: Path) -> None:
    edit(run / "summary.json", lambda s: s.update(rollouts=5))
    assert refused(run) == (
        f"{run / 'summary.json'}: rollouts is 5 in summary.json but 4 recomputed from"
        " results.jsonl and run.json"
    )


def test_a_baseline_of_another_env_is_refused_when_read_again(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", rollouts((0.0, 0.0, 0.0, 0.0)))
    run = write_run(tmp_path / "run", baseline=base)
    other = {"name": "t", "version": 1, "fingerprint": "e" * 64}  # the baseline re-made, intact
    edit(base / "run.json", lambda m: m.update(env=other))
    edit(base / "summary.json", lambda s: s.update(env=other))
    edit(base / "summary.json", lambda s: s.update(run_json_digest=run_json_digest(base)))
    assert read_audited_run(base).summary["env"] == other
    assert refused(run) == (
        f"{run / 'run.json'}: the run was judged against a baseline that cannot be read again:"
        f" --baseline {base}: env fingerprint eeeeeeeeeeee differs from the run's ffffffffffff"
        " (a baseline must be the same env)"
    )


def test_live_judgments_are_counted_from_the_judge_logs(tmp_path: Path) -> None:
    judges = {"judged": {"mode": "live", "model": "openai:j"}}
    log = tmp_path / "run" / "judge-judged.jsonl"
    log.parent.mkdir()
    log.write_text('{"key": "a"}\n{"key": "b"}\n')
    run = tmp_path / "written"
    log.parent.rename(run.parent / "staged")
    staged = run.parent / "staged"
    written = write_run(run, judges=judges)
    (staged / "judge-judged.jsonl").rename(written / "judge-judged.jsonl")
    edit(
        written / "summary.json",
        lambda s: s.update(judges={"judged": {"mode": "live", "live_judgments": 2}}),
    )
    edit(written / "summary.json", lambda s: s.update(run_json_digest=run_json_digest(written)))
    assert read_audited_run(written).summary["judges"] == {
        "judged": {"mode": "live", "live_judgments": 2}
    }
    with open(written / "judge-judged.jsonl", "a") as handle:
        handle.write('{"key": "c"}\n')  # a judgment the run never made
    assert refused(written) == (
        f"{written / 'summary.json'}: judges.judged.live_judgments is 2 in summary.json but 3"
        " recomputed from results.jsonl and run.json"
    )
