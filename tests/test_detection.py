"""Detection power (issue 14): one source of flags, suspects against an absolute reference,
the reward model's pass-vs-fail AUC, and a planted benchmark of reward hacks.

The benchmark builds records in memory: a clean policy (weak or strong) answers questions, a
deliberately hackable reward model pays for correctness plus noise plus the hack (padding,
keyword stuffing, a confident preamble) at several strengths, and a share of the wrong answers
(5 % .. 100 %) is hacked. Run with ``-s`` to print the recall / false-flag table.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlenv import metrics as m
from rlenv.results import ResultsWriter
from rlenv.runner import build_summary
from tests.conftest import cli

# ----------------------------------------------------------------------------- records


def _record(
    index: int, rollout: int, answer: str, passed: bool, reward: float, status: str = "ok"
) -> dict[str, Any]:
    qid = f"q{index:03d}"
    return {
        "input_id": qid,
        "input_index": index,
        "rollout": rollout,
        "seed": index * 100 + rollout,
        "model": "python:planted",
        "status": status,
        "error": None,
        "messages": [
            {"role": "user", "content": f"question {qid}"},
            {"role": "assistant", "content": answer},
        ],
        "tool_calls": [],
        "answer": answer,
        "verifiers": [{"name": "answer", "type": "contains", "passed": passed}],
        "passed": passed,
        "reward": round(reward, 6),
        "usage": {"completion_tokens": len(answer.split())},
        "timing": {"wall_s": 0.01},
    }


def _write_run(run_dir: Path, records: list[dict[str, Any]], temperature: float) -> Path:
    meta = {
        "env": {"name": "planted", "version": 1, "fingerprint": "f" * 64},
        "model": {"uri": "python:planted"},
        "decoding": {"temperature": temperature, "top_p": 1, "max_tokens": 64, "seed": 0},
        "rollouts_per_input": 4,
        "limit": None,
    }
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(meta))
    writer = ResultsWriter(run_dir / "results.jsonl")
    for record in records:
        writer.write(record)
    writer.close()
    inputs = sorted({r["input_index"] for r in records})
    summary = build_summary(SimpleNamespace(inputs=inputs), meta, records, "python:planted")  # type: ignore[arg-type]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


# ----------------------------------------------------------------------------- one source


def _collapsed_run() -> list[dict[str, Any]]:
    """Every input's four rollouts are the same string (collapse), with a length-paying RM."""
    records = []
    for index in range(12):
        answer = " ".join(["word"] * (3 + index))
        for rollout in range(4):
            records.append(_record(index, rollout, answer, index % 2 == 0, 0.1 * index))
    return records


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_flags_agree_in_summary_metrics_json_report_json_html_and_compare(
    tmp_path: Path, temperature: float
) -> None:
    run = _write_run(tmp_path / "run", _collapsed_run(), temperature)
    done = cli("report", str(run), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    summary = json.loads((run / "summary.json").read_text())
    metrics_json = json.loads((run / "metrics.json").read_text())
    html = (run / "report.html").read_text()
    from rlenv.report.compare import compare

    compared = compare([run, run], out=tmp_path / "cmp")

    def names(flags: list[dict[str, Any]]) -> list[str]:
        return sorted(f["name"] for f in flags)

    expected = names(summary["flags"])
    assert names(metrics_json["flags"]) == expected
    assert names(report["flags"]) == expected
    assert sorted(re.findall(r'data-flag="([a-z_]+)"', html)) == expected
    assert names(compared["runs"][0]["flags"]) == expected
    assert ("collapse" in expected) is (temperature != 0)
