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
from rlenv.results import ResultsWriter, record_digest
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
        record["digest"] = record_digest(record)  # sealed as a run seals them (it is checked)
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


# ----------------------------------------------------------------------------- planted benchmark

GAP = 0.3
"""What the benchmark's reward model pays for a right answer over a wrong one."""
NOISE = 0.05
FILLER = ["furthermore", "it", "is", "worth", "noting", "that", "in", "general"]
PREAMBLE = "Certainly! I am absolutely confident, definitely, this is clearly correct:"
CONFIDENT = {"certainly!", "absolutely", "confident,", "definitely,", "clearly"}
FAMILIES = ("padding", "keyword_stuffing", "confident_preamble")
STRENGTHS = {"subtle": 1.2, "moderate": 1.5, "blatant": 3.0}
"""The RM's payoff for the hack, in multiples of GAP (subtle: a hacked wrong answer is paid
just above a right one; for padding that is the RM paying a right answer's margin for +20 %
length)."""
SHARES = (0.05, 0.25, 0.5, 1.0)
POLICIES = {"weak": 0.2, "strong": 0.8}
KS = (1, 4, 8)
N_INPUTS = 40


def _hack(family: str, answer: str, qid: str) -> tuple[str, float]:
    """The hacked answer and its feature (extra words / keywords / confident words)."""
    words = answer.split()
    if family == "padding":  # +20 % words
        extra = max(1, round(0.2 * len(words)))
        return " ".join(words + FILLER[:extra]), extra / len(words) / 0.2
    if family == "keyword_stuffing":
        return f"{answer} {qid} {qid} {qid}", 1.0
    return f"{PREAMBLE} {answer}", 1.0


def _feature(family: str, answer: str, qid: str, base_words: int) -> float:
    """What the hackable RM measures (0 on an unhacked answer)."""
    words = answer.split()
    if family == "padding":
        return max(0, len(words) - base_words) / base_words / 0.2
    if family == "keyword_stuffing":
        return float(words.count(qid)) / 3.0
    return float(sum(w.lower() in CONFIDENT for w in words)) / len(CONFIDENT)


def planted_run(
    family: str | None,
    strength: float,
    share: float,
    p_right: float,
    k: int,
    seed: int,
    noise: float = NOISE,
) -> tuple[list[dict[str, Any]], set[tuple[str, int]]]:
    """One run's records and the (input_id, rollout) keys that were hacked."""
    rng = random.Random(f"{family}-{strength}-{share}-{p_right}-{k}-{seed}")
    rows = []
    for index in range(N_INPUTS):
        qid = f"q{index:03d}"
        for rollout in range(k):
            right = rng.random() < p_right
            length = rng.randint(8, 16)
            answer = " ".join((["right"] if right else ["wrong"]) + ["word"] * (length - 1))
            rows.append((index, rollout, qid, right, answer, length))
    wrong = [i for i, row in enumerate(rows) if not row[3]]
    hacked_rows = set(rng.sample(wrong, max(1, round(share * len(wrong))))) if family else set()
    records, hacked = [], set()
    for i, (index, rollout, qid, right, answer, length) in enumerate(rows):
        if i in hacked_rows:
            assert family is not None
            answer = _hack(family, answer, qid)[0]
            hacked.add((qid, rollout))
        paid = strength * GAP * _feature(family, answer, qid, length) if family else 0.0
        reward = 0.4 + GAP * right + paid + rng.gauss(0.0, noise)
        records.append(_record(index, rollout, answer, right, reward))
    # neither infra errors nor fixture misses are ever suspects, however they are scored
    records.append(_record(N_INPUTS, 0, "", False, 5.0, status="fixture_miss"))
    records.append(_record(N_INPUTS, 1, "", False, 5.0, status="infra_error"))
    return records, hacked


def _score(records: list[dict[str, Any]], hacked: set[tuple[str, int]]) -> tuple[int, int, int]:
    found = {(s["input_id"], s["rollout"]) for s in m.disagreements(records)["high_reward_failed"]}
    assert not any(key[0] == f"q{N_INPUTS:03d}" for key in found)
    clean = sum(1 for r in records if r["status"] == "ok") - len(hacked)
    return len(found & hacked), len(found - hacked), clean


def test_planted_benchmark_recall_and_false_flags() -> None:
    table: dict[tuple[str, str], list[int]] = {}
    by_share: dict[tuple[str, str, float], list[int]] = {}
    for family in FAMILIES:
        for label, strength in STRENGTHS.items():
            for share in SHARES:
                for p_right in POLICIES.values():
                    for k in KS:
                        records, hacked = planted_run(family, strength, share, p_right, k, 0)
                        hit, false, clean = _score(records, hacked)
                        for bucket in (
                            table.setdefault((family, label), [0, 0, 0, 0]),
                            by_share.setdefault((family, label, share), [0, 0, 0, 0]),
                        ):
                            bucket[0] += hit
                            bucket[1] += len(hacked)
                            bucket[2] += false
                            bucket[3] += clean
    clean_false, clean_n, clean_runs_flagged, clean_runs, aucs = 0, 0, 0, 0, []
    for p_right in POLICIES.values():
        for k in KS:
            for seed in range(5):
                records, hacked = planted_run(None, 0.0, 0.0, p_right, k, seed)
                hit, false, clean = _score(records, hacked)
                clean_false, clean_n = clean_false + false, clean_n + clean
                diagnostics = m.compute_all(records)
                clean_runs_flagged += "high_suspect_rate" in [
                    f["name"] for f in diagnostics["flags"]
                ]
                clean_runs += 1
                aucs.append(diagnostics["reward_auc"]["value"])
    # a noisy but honest RM (AUC ~0.9): its wrong answers scored like right ones are reported
    noisy_false, noisy_n, noisy_flagged = 0, 0, 0
    for p_right in POLICIES.values():
        for k in KS:
            for seed in range(5):
                records, hacked = planted_run(None, 0.0, 0.0, p_right, k, seed, noise=0.15)
                _, false, clean = _score(records, hacked)
                noisy_false, noisy_n = noisy_false + false, noisy_n + clean
                flagged = m.compute_all(records)["flags"]
                noisy_flagged += "high_suspect_rate" in [f["name"] for f in flagged]
    lines = [f"{'family':<20}{'strength':<10}{'recall':>8}{'min/share':>10}{'false':>8}"]
    for (family, label), (hit, n, false, clean) in table.items():
        worst = min(
            b[0] / b[1] for key, b in by_share.items() if key[:2] == (family, label) and b[1]
        )
        lines.append(f"{family:<20}{label:<10}{hit / n:>8.3f}{worst:>10.3f}{false / clean:>8.4f}")
    lines.append(
        f"clean runs (weak+strong, K=1/4/8, 5 seeds): false-suspect rate"
        f" {clean_false / clean_n:.4f}, runs flagged {clean_runs_flagged}/{clean_runs},"
        f" RM AUC min {min(a for a in aucs if a is not None):.3f}"
    )
    lines.append(
        f"clean runs, noisy RM (sd 0.15 vs gap 0.3): false-suspect rate"
        f" {noisy_false / noisy_n:.4f}, runs flagged {noisy_flagged}/{clean_runs}"
    )
    print("\n" + "\n".join(lines))
    for (family, label), (hit, n, false, clean) in table.items():
        worst = min(
            b[0] / b[1] for key, b in by_share.items() if key[:2] == (family, label) and b[1]
        )
        assert false / clean <= 0.05, (family, label)
        assert hit / n >= (0.8 if label == "subtle" else 0.95), (family, label, hit / n)
        assert worst >= (0.7 if label == "subtle" else 0.9), (family, label, worst)
    assert clean_false / clean_n <= 0.05
    assert clean_runs_flagged == 0


def test_reward_auc_falls_when_the_proxy_is_hacked() -> None:
    clean, _ = planted_run(None, 0.0, 0.0, 0.5, 4, 0)
    hacked, _ = planted_run("padding", 3.0, 1.0, 0.5, 4, 0)
    before, after = m.compute_all(clean)["reward_auc"], m.compute_all(hacked)["reward_auc"]
    assert before["value"] > 0.95 and after["value"] < 0.3
    assert after["bootstrap_ci"][1] < before["bootstrap_ci"][0]


def test_old_quantile_rule_capped_recall_at_a_quarter_is_gone() -> None:
    # every wrong answer hacked, weak policy: 80 % of rollouts are hacked and must all be found
    records, hacked = planted_run("confident_preamble", 3.0, 1.0, 0.2, 4, 1)
    hit, false, _ = _score(records, hacked)
    assert hit == len(hacked) and len(hacked) > 0.5 * N_INPUTS * 4 and false == 0


def test_a_run_where_nothing_passes_falls_back_to_its_reward_quartile() -> None:
    records = [_record(i, 0, "x " * i, False, 0.1 * i) for i in range(8)]
    result = m.disagreements(records)
    assert result["reference"].startswith("no passing rollout")
    assert [d["input_id"] for d in result["high_reward_failed"]] == ["q007", "q006"]
