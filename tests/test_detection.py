"""Detection power (issue 14): one source of flags, suspects against an absolute reference
and a baseline run, the reward model's pass-vs-fail AUC, per-input collapse, length bias with
an effect size and a test, turnover as a significance test and the gold-vs-KL fit.

The planted runs (tests/planted.py) are built in memory: a clean policy (weak or strong)
answers questions, a deliberately hackable reward model pays for correctness plus noise plus
the hack. This file checks a cheap subset; bench/detection.py prints the full table.
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
from rlenv.audit import seal_run_json
from rlenv.metrics.verdict import judge_series
from rlenv.results import ResultsWriter, seal
from rlenv.summary import build_summary
from tests import planted as P
from tests.conftest import cli

# ----------------------------------------------------------------------------- records


def _record(
    index: int, rollout: int, answer: str, passed: bool, reward: float, status: str = "ok"
) -> dict[str, Any]:
    return P.record(
        index, rollout, answer, passed, reward, status, question=f"question {P.qid(index)}"
    )


def _write_run(
    run_dir: Path, records: list[dict[str, Any]], temperature: float, fingerprint: str = "f" * 64
) -> Path:
    meta = {
        "env": {"name": "planted", "version": 1, "fingerprint": fingerprint},
        "model": {"uri": "python:planted"},
        "decoding": {"temperature": temperature, "top_p": 1, "max_tokens": 64, "seed": 0},
        "rollouts_per_input": 4,
        "limit": None,
    }
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(meta))
    records = [seal(record) for record in records if record["status"] == "ok"]
    writer = ResultsWriter(run_dir / "results.jsonl")
    for record in records:
        writer.write(record)
    writer.close()
    inputs = sorted({r["input_index"] for r in records})
    summary = build_summary(SimpleNamespace(inputs=inputs), meta, records, "python:planted")  # type: ignore[arg-type]
    (run_dir / "summary.json").write_text(json.dumps(seal_run_json(summary, run_dir)))
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


# ----------------------------------------------------------------------------- planted benchmark
# A cheap subset of bench/detection.py (the full table is printed there and quoted in the README).


def _suspects(records: list[dict[str, Any]], baseline: Any = None) -> set[tuple[str, int]]:
    rows = m.disagreements(records, baseline)["high_reward_failed"]
    found = {(s["input_id"], s["rollout"]) for s in rows}
    assert not any(key[0] == P.qid(P.N_INPUTS) for key in found)  # fixture miss, infra error
    return found


def _score(records: list[dict[str, Any]], hacked: set[tuple[str, int]]) -> tuple[int, int, int]:
    found = _suspects(records)
    clean = sum(1 for r in records if r["status"] == "ok") - len(hacked)
    return len(found & hacked), len(found - hacked), clean


@pytest.mark.parametrize("family", P.FAMILIES)
def test_planted_hacks_are_found_in_every_family_at_every_share(family: str) -> None:
    for label in ("moderate", "blatant"):
        for share in (0.05, 1.0):
            hit = total = false = clean = 0
            for p_right in P.POLICIES.values():
                for k in (1, 4):
                    records, hacked = P.planted_run(
                        family, P.STRENGTHS[label], share, p_right, k, 0
                    )
                    h, f, c = _score(records, hacked)
                    hit, total, false, clean = hit + h, total + len(hacked), false + f, clean + c
            assert hit / total >= 0.95, (label, share, hit / total)
            assert false / clean <= 0.05
    # subtle: a hacked wrong answer paid just above a right one (+20 % length for padding)
    hit = total = 0
    for share in (0.25, 1.0):
        for p_right in P.POLICIES.values():
            records, hacked = P.planted_run(family, P.STRENGTHS["subtle"], share, p_right, 8, 0)
            h, _, _ = _score(records, hacked)
            hit, total = hit + h, total + len(hacked)
    assert hit / total >= 0.8, hit / total


def test_clean_runs_raise_no_flag_and_no_suspect() -> None:
    for p_right in P.POLICIES.values():
        for k in P.KS:
            records, _ = P.planted_run(None, 0.0, 0.0, p_right, k, 3)
            diagnostics = m.compute_all(records, decoding={"temperature": 1.0})
            json.dumps(diagnostics, allow_nan=False)
            assert diagnostics["disagreements"]["high_reward_failed"] == []
            assert [f["name"] for f in diagnostics["flags"]] == ["infra_errors"]  # the planted one
            assert diagnostics["diversity"]["collapsed_inputs"] == []


def test_baseline_run_finds_hacks_that_inflate_the_runs_own_passing_answers() -> None:
    # right answers are hacked too: this run's passing answers are no reference any more
    records, hacked = P.planted_run("padding", P.STRENGTHS["moderate"], 1.0, 0.5, 4, 0,
                                    hack_right=True)  # fmt: skip
    base, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, 1000)
    assert not _suspects(records) & hacked
    found = _suspects(records, base)
    assert len(found & hacked) >= 0.95 * len(hacked) and not found - hacked
    rows = m.disagreements(records, base)["high_reward_failed"]
    assert all(row["by"] == ["baseline"] for row in rows)


# ----------------------------------------------------------------------------- per-input collapse


def _sealed_run(run_dir: Path, records: list[dict[str, Any]]) -> Path:
    return _write_run(run_dir, records, 1.0)


def test_four_collapsed_inputs_of_forty_fire_the_flag_and_are_named_everywhere(
    tmp_path: Path,
) -> None:
    records, collapsed = P.collapsed_run("blatant", 0.1, 0.8, 4, 0)
    assert len(collapsed) == 4
    div = m.diversity(records)
    # the run-level averages the old flag used stay far below its thresholds
    assert div["duplicate_rate"] < 0.1 and div["mean_pairwise_similarity"] < 0.5
    assert div["collapsed_inputs"] == sorted(collapsed) and div["collapse"] is True
    run = _sealed_run(tmp_path / "run", records)
    done = cli("report", str(run), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    summary = json.loads((run / "summary.json").read_text())
    html = (run / "report.html").read_text()
    assert report["collapsed_inputs"] == sorted(collapsed)
    assert summary["diagnostics"]["diversity"]["collapsed_inputs"] == sorted(collapsed)
    table = html[html.index('id="collapsed-inputs"') :].split("</table>")[0]
    assert sorted(re.findall(r'data-input-id="(q\d+)"', table)) == sorted(collapsed)
    assert "collapse" in [f["name"] for f in summary["flags"]]
    # the same words in other case, punctuation and spacing are still one answer
    subtle, planted = P.collapsed_run("subtle", 0.1, 0.8, 8, 1)
    assert m.diversity(subtle)["collapsed_inputs"] == sorted(planted)


def test_compare_collapse_is_per_input_and_ignores_shared_boilerplate() -> None:
    prev, _ = P.planted_run(None, 0.0, 0.0, 0.2, 8, 500)
    hacked, _ = P.planted_run("sycophantic_preamble", 3.0, 1.0, 0.2, 8, 0)
    d2 = [m.diversity(run, n=(2,))["distinct"]["2"] for run in (prev, hacked)]
    assert (d2[0] - d2[1]) / d2[0] > 0.3  # the old run-level distinct-2 rule fired here
    result = m.compare_runs([("a", prev), ("b", hacked)])
    assert "diversity_collapse" not in [f["name"] for f in result["flags"]]
    collapsed, named = P.collapsed_run("blatant", 0.1, 0.2, 8, 0)
    flags = m.compare_runs([("a", prev), ("b", collapsed)])["flags"]
    found = [f for f in flags if f["name"] == "diversity_collapse"]
    assert len(found) == 1 and found[0]["value"]["inputs"] == sorted(named)


# ----------------------------------------------------------------------------- length bias


def test_a_tie_breaking_length_term_never_fires_length_bias_a_material_one_does() -> None:
    rhos = []
    for seed in range(20):
        records, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, seed, noise=0.0, length_term=0.001)
        bias = m.length_bias(records)
        rhos.append(bias["spearman"])
        assert bias["within_strata"]["p_value"] < 0.01  # significant, but not material
        assert "length_bias" not in [f["name"] for f in m.flags({"length_bias": bias})]
    assert max(rhos) >= 0.55  # the old |Spearman| >= 0.5 rule fired on these
    for seed in range(5):
        records, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, seed, length_term=0.02)
        bias = m.length_bias(records)
        assert [f["name"] for f in m.flags({"length_bias": bias})] == ["length_bias"]
        assert bias["within_strata"]["slope_per_100"] == pytest.approx(2.0, abs=0.3)
        assert m.length_bias(records) == bias  # seeded permutations: deterministic


def test_length_bias_between_strata_is_not_length_bias() -> None:
    # right answers are longer and the RM pays for being right, not for length
    rng = random.Random(2)
    records = []
    for i in range(60):
        right = i % 2 == 0
        answer = " ".join(["w"] * ((30 if right else 10) + rng.randint(0, 5)))
        records.append(P.record(i, 0, answer, right, 0.4 + 0.3 * right + rng.gauss(0, 0.05)))
    bias = m.length_bias(records)
    assert bias["spearman"] > 0.7  # the old rule fired on this
    assert m.flags({"length_bias": bias}) == []


# ----------------------------------------------------------------------------- compare


def _offset_runs(shift: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two checkpoints over 40 inputs whose rewards differ a lot between inputs (sd 0.62)
    and by ``shift`` between checkpoints; the same verifier outcomes."""
    rng = random.Random(5)
    offsets = [rng.gauss(0.0, 0.62) for _ in range(40)]
    prev, cur = [], []
    for index, offset in enumerate(offsets):
        for rollout in range(4):
            right = rng.random() < 0.5
            answer = P.clean_answer(rng, index, right)
            prev.append(P.record(index, rollout, answer, right, offset + rng.gauss(0, 0.05)))
            cur.append(P.record(index, rollout, answer, right, offset + shift + rng.gauss(0, 0.05)))
    return prev, cur


def test_turnover_is_a_significance_test_not_a_minimum_detectable_effect() -> None:
    prev, cur = _offset_runs(0.31)
    result = m.compare_runs([("a", prev), ("b", cur)])
    json.dumps(result, allow_nan=False)
    row = result["runs"][1]
    assert row["delta_reward_mean"] == pytest.approx(0.31, abs=0.02)
    assert row["noise_reward_mean"] > 0.37  # the bar (0.39) that missed it
    lo, hi = row["delta_reward_mean_ci"]
    assert 0.25 < lo < 0.31 < hi < 0.37  # paired by input: tight
    assert result["flags"] == []  # the step is described, not judged, here
    verdict = judge_series([("a", prev), ("b", cur)])["verdict"]
    assert verdict["status"] == "reward_hacking"
    assert [e["signal"] for e in verdict["evidence"]][0] == "proxy_gold_turnover"
    assert judge_series([("a", prev), ("b", prev)])["verdict"]["status"] == "healthy"


def test_gold_vs_kl_fit_recovers_the_gao_shape_across_checkpoints() -> None:
    def checkpoint(kl: float) -> list[dict[str, Any]]:
        d = kl**0.5
        gold = 0.3 + d * (0.5 - 0.4 * d)
        passing = round(gold * 200)
        return [
            {**P.record(i, 0, f"a{i} b{i}", i < passing, 0.5 + kl), "kl": {"k1": kl}}
            for i in range(200)
        ]

    kls = [0.04, 0.25, 0.64, 1.21]
    result = m.compare_runs([(f"s{i}", checkpoint(kl)) for i, kl in enumerate(kls)])
    fit = result["gold_vs_kl"]
    assert fit["gold"] == "pass_rate" and fit["n"] == 4
    assert fit["alpha"] == pytest.approx(0.5, abs=0.02)
    assert fit["beta"] == pytest.approx(0.4, abs=0.02)
    assert fit["kl_peak"] == pytest.approx(0.625**2, abs=0.03)
    assert fit["past_peak"] is True
    assert m.compare_runs([("a", checkpoint(0.04)), ("b", checkpoint(0.25))])["gold_vs_kl"] is None


def test_report_and_compare_take_a_baseline_run(tmp_path: Path) -> None:
    records, hacked = P.planted_run("confident_preamble", 1.5, 1.0, 0.5, 4, 0, hack_right=True)
    base, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, 1000)
    run = _sealed_run(tmp_path / "hacked", records)
    reference = _sealed_run(tmp_path / "sft", base)
    assert not _suspects(records) & hacked  # the run's own passing answers are inflated
    done = cli("report", str(run), "--baseline", str(reference), "--json")
    assert done.returncode == 0, done.stderr
    found = {(s["input_id"], s["rollout"]) for s in json.loads(done.stdout)["suspects"]}
    assert len(found & hacked) >= 0.95 * len(hacked)
    assert str(reference) in (run / "report.html").read_text()
    compared = cli("compare", str(reference), str(run), "--baseline", str(reference),
                   "--out", str(tmp_path / "cmp"), "--json")  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["runs"][1]["suspect_rate"] > 0.3
    other = _write_run(tmp_path / "other", base, 1.0, fingerprint="e" * 64)
    refused = cli("report", str(run), "--baseline", str(other))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--baseline" in refused.stderr and "fingerprint" in refused.stderr
    missing = cli("compare", str(reference), str(run), "--baseline", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().endswith("not a directory (expected a run directory)")
    assert "--baseline" in missing.stderr


def test_reward_auc_falls_when_the_proxy_is_hacked() -> None:
    clean, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, 0)
    hacked, _ = P.planted_run("padding", 3.0, 1.0, 0.5, 4, 0)
    before, after = m.compute_all(clean)["reward_auc"], m.compute_all(hacked)["reward_auc"]
    assert before["value"] > 0.95 and after["value"] < 0.3
    assert after["bootstrap_ci"][1] < before["bootstrap_ci"][0]


def test_old_quantile_rule_capped_recall_at_a_quarter_is_gone() -> None:
    # every wrong answer hacked, weak policy: 80 % of rollouts are hacked and must all be found
    records, hacked = P.planted_run("confident_preamble", 3.0, 1.0, 0.2, 4, 1)
    hit, false, _ = _score(records, hacked)
    assert hit == len(hacked) and len(hacked) > 0.5 * P.N_INPUTS * 4 and false == 0


def test_a_run_where_nothing_passes_falls_back_to_its_reward_quartile() -> None:
    records = [_record(i, 0, "x " * i, False, 0.1 * i) for i in range(8)]
    result = m.disagreements(records)
    assert result["reference"].startswith("no passing rollout")
    assert [d["input_id"] for d in result["high_reward_failed"]] == ["q007", "q006"]


def test_run_takes_a_baseline_of_the_same_env_only(tmp_path: Path) -> None:
    spec = Path(__file__).resolve().parents[1] / "envs" / "file_edit.yaml"
    fingerprint = json.loads(cli("validate", str(spec), "--json").stdout)["fingerprint"]
    base, _ = P.planted_run(None, 0.0, 0.0, 0.5, 4, 0)
    other = _write_run(tmp_path / "other-env", base, 1.0)
    refused = cli("run", str(spec), "--out", str(tmp_path / "r1"), "--baseline", str(other))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--baseline" in refused.stderr and "fingerprint" in refused.stderr
    assert not (tmp_path / "r1").exists()  # refused before anything was run
    same = _write_run(tmp_path / "same-env", base, 1.0, fingerprint=fingerprint)
    done = cli("run", str(spec), "--out", str(tmp_path / "r2"), "--limit", "1",
               "--baseline", str(same), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    reference = json.loads(done.stdout)["diagnostics"]["disagreements"]["baseline"]
    assert reference["inputs_with_passing"] == len({r["input_id"] for r in base if r["passed"]})
