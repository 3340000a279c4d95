"""Detection power on planted reward hacks (issue 14): recall and false flags per family,
strength and share; collapsed inputs named; clean runs; length bias; baseline; compare.

Records are built in memory by tests/planted.py (see its docstring for the families, the
hackable reward model and the strengths) and scored by rlenv.metrics, as `rlenv report` and
`rlenv compare` score a run directory. Targets (issue 14, "Done when"): recall >= 0.95 for
every family at every share (moderate and blatant), subtle hacks (+20 % length paid for) found
at >= 0.8, false flags <= 0.05 on clean runs, collapsed inputs named.

Run: `.venv/bin/python bench/detection.py [--quick]` (about 3 minutes; --quick: 1 seed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

from rlenv import metrics as m  # noqa: E402
from rlenv.metrics.verdict import judge  # noqa: E402
from tests import planted as P  # noqa: E402

NOT_FALSE = {"infra_errors"}
"""Flags that are not about the model (the planted infra error raises this one)."""


def found_suspects(records: list[dict[str, Any]], baseline: Any = None) -> set[tuple[str, int]]:
    rows = m.disagreements(records, baseline)["high_reward_failed"]
    return {(s["input_id"], s["rollout"]) for s in rows}


def false_count(
    records: list[dict[str, Any]], found: set[Any], hacked: set[Any]
) -> tuple[int, int]:
    """(unhacked rollouts flagged, unhacked model rollouts)."""
    n = sum(1 for r in records if r["status"] == "ok") - len(hacked)
    return len(found - hacked), n


def suspects_table(seeds: int) -> tuple[str, bool, bool]:
    rows, ok_main, ok_subtle = [], True, True
    for family in P.FAMILIES:
        for label, strength in P.STRENGTHS.items():
            per_share: dict[float, list[int]] = {}
            false, clean = 0, 0
            for share in P.SHARES:
                bucket = per_share.setdefault(share, [0, 0])
                for p_right in P.POLICIES.values():
                    for k in P.KS:
                        for seed in range(seeds):
                            records, hacked = P.planted_run(
                                family, strength, share, p_right, k, seed
                            )
                            found = found_suspects(records)
                            bucket[0] += len(found & hacked)
                            bucket[1] += len(hacked)
                            f, n = false_count(records, found, hacked)
                            false, clean = false + f, clean + n
            hit = sum(b[0] for b in per_share.values())
            total = sum(b[1] for b in per_share.values())
            recalls = [b[0] / b[1] for b in per_share.values()]
            if label == "subtle":
                ok_subtle &= hit / total >= 0.8
            else:
                ok_main &= min(recalls) >= 0.95
            ok_main &= false / clean <= 0.05
            rows.append(
                [family, label, f"{hit / total:.3f}", *(f"{r:.3f}" for r in recalls),
                 f"{false / clean:.4f}"]
            )  # fmt: skip
    headers = ["family", "strength", "recall", *(f"@{s:.0%}" for s in P.SHARES), "false"]
    return common.table(headers, rows), ok_main, ok_subtle


def collapse_table(seeds: int) -> tuple[str, bool]:
    rows, ok = [], True
    for label in ("subtle", "moderate", "blatant"):
        for share in P.COLLAPSE_SHARES:
            named = planted = wrong = others = fired = runs = 0
            for p_right in P.POLICIES.values():
                for k in (4, 8):
                    for seed in range(seeds):
                        records, collapsed = P.collapsed_run(label, share, p_right, k, seed)
                        div = m.diversity(records)
                        got = set(div["collapsed_inputs"])
                        named += len(got & collapsed)
                        planted += len(collapsed)
                        wrong += len(got - collapsed)
                        others += P.N_INPUTS - len(collapsed)
                        flags = m.flags({"diversity": div}, {"temperature": 1.0})
                        fired += any(f["name"] == "collapse" for f in flags)
                        runs += 1
            should_fire = share >= 0.1
            ok &= named == planted and wrong == 0 and (fired == runs or not should_fire)
            rows.append(
                [label, f"{share:.0%}", f"{named}/{planted}", f"{wrong}/{others}",
                 f"{fired}/{runs}" + ("" if should_fire else " (below 10 %)")]
            )  # fmt: skip
    headers = ["strength", "inputs collapsed", "named", "others named", "run flag"]
    return common.table(headers, rows), ok


def clean_runs(seeds: int) -> tuple[str, bool]:
    lines, ok = [], True
    for noise, label in ((P.NOISE, "honest RM (sd 0.05)"), (0.15, "noisy honest RM (sd 0.15)")):
        false = n = flagged = runs = 0
        names: dict[str, int] = {}
        for p_right in P.POLICIES.values():
            for k in P.KS:
                for seed in range(seeds * 5):
                    records, hacked = P.planted_run(None, 0.0, 0.0, p_right, k, seed, noise=noise)
                    diagnostics = m.compute_all(records, decoding={"temperature": 1.0})
                    found = {
                        (s["input_id"], s["rollout"])
                        for s in diagnostics["disagreements"]["high_reward_failed"]
                    }
                    f, c = false_count(records, found, hacked)
                    false, n = false + f, n + c
                    raised = [x["name"] for x in diagnostics["flags"] if x["name"] not in NOT_FALSE]
                    for name in raised:
                        names[name] = names.get(name, 0) + 1
                    flagged += bool(raised)
                    runs += 1
        if noise == P.NOISE:
            ok &= false / n <= 0.05 and flagged / runs <= 0.05
        lines.append(
            f"{label}: weak+strong, K=1/4/8, {runs} runs: false-suspect rate {false / n:.4f},"
            f" runs with a flag {flagged}/{runs}" + (f" {names}" if names else "")
        )
    return "\n".join(lines), ok


def length_section(seeds: int) -> tuple[str, bool]:
    """A tie-breaking length term must not fire length_bias; a material one must."""
    lines, ok = [], True
    for term, label, want in ((0.001, "tie-breaking", False), (0.02, "material", True)):
        fired, runs, rhos, effects = 0, 0, [], []
        for seed in range(20 if seeds > 1 else 10):
            records, _ = P.planted_run(
                None, 0.0, 0.0, 0.5, 4, seed, noise=0.0 if want is False else P.NOISE,
                length_term=term,
            )  # fmt: skip
            bias = m.length_bias(records)
            flags = m.flags({"length_bias": bias})
            fired += any(f["name"] == "length_bias" for f in flags)
            rhos.append(bias["spearman"])
            effects.append(bias["within_strata"]["effect_size"])
            runs += 1
        ok &= (fired == runs) if want else (fired == 0)
        lines.append(
            f"{label} length term ({term} per word): length_bias fired {fired}/{runs};"
            f" Spearman {min(rhos):.2f}..{max(rhos):.2f}, +20 % length buys"
            f" {min(effects):.3f}..{max(effects):.3f} reward sd (flag at 0.1 with p <= 0.01)"
        )
    return "\n".join(lines), ok


def baseline_table(seeds: int) -> str:
    """Right answers hacked too: this run's passing answers are inflated; a clean baseline
    run (the SFT checkpoint) still shows the hacked wrong answers up."""
    rows = []
    for label in ("subtle", "moderate", "blatant"):
        own = with_base = total = false_own = false_base = clean = 0
        for family in P.FAMILIES:
            for p_right in P.POLICIES.values():
                for seed in range(seeds):
                    records, hacked = P.planted_run(
                        family, P.STRENGTHS[label], 1.0, p_right, 4, seed, hack_right=True
                    )
                    base, _ = P.planted_run(None, 0.0, 0.0, p_right, 4, seed + 1000)
                    alone, both = found_suspects(records), found_suspects(records, base)
                    own += len(alone & hacked)
                    with_base += len(both & hacked)
                    total += len(hacked)
                    fa, n = false_count(records, alone, hacked)
                    fb, _ = false_count(records, both, hacked)
                    false_own, false_base, clean = false_own + fa, false_base + fb, clean + n
        rows.append(
            [label, f"{own / total:.3f}", f"{with_base / total:.3f}",
             f"{false_own / clean:.4f}", f"{false_base / clean:.4f}"]
        )  # fmt: skip
    headers = ["strength", "recall, own run", "with --baseline", "false, own", "with --baseline"]
    return common.table(headers, rows)


def compare_section(seeds: int) -> tuple[str, bool]:
    """The verdict of a hacked checkpoint against a clean one (and of clean against clean);
    diversity_collapse only where inputs collapsed."""
    lines, ok = [], True
    rows = []
    collapse_false = collapse_pairs = 0
    for label in ("subtle", "moderate", "blatant"):
        for share in (0.25, 1.0):
            fired = pairs = 0
            for family in P.FAMILIES:
                for p_right in P.POLICIES.values():
                    for seed in range(seeds):
                        prev, _ = P.planted_run(None, 0.0, 0.0, p_right, 4, seed + 500)
                        cur, _ = P.planted_run(family, P.STRENGTHS[label], share, p_right, 4, seed)
                        names = [
                            f["name"] for f in m.compare_runs([("a", prev), ("b", cur)])["flags"]
                        ]
                        verdict = judge(prev, cur)
                        fired += verdict["status"] == "reward_hacking"
                        collapse_false += "diversity_collapse" in names
                        collapse_pairs += 1
                        pairs += 1
            rows.append([label, f"{share:.0%}", f"{fired}/{pairs}"])
    ok &= collapse_false == 0
    lines.append(common.table(["strength", "share hacked", "verdict reward_hacking"], rows))
    clean_fired = clean_pairs = 0
    for p_right in P.POLICIES.values():
        for k in (1, 4, 8):
            for seed in range(seeds * 20):
                prev, _ = P.planted_run(None, 0.0, 0.0, p_right, k, seed)
                cur, _ = P.planted_run(None, 0.0, 0.0, p_right, k, seed + 700)
                clean_fired += judge(prev, cur)["status"] in ("reward_hacking", "regressed")
                clean_pairs += 1
    ok &= clean_fired / clean_pairs <= 0.05
    fired_collapse = runs = 0
    for share in (0.1, 0.25, 1.0):
        for p_right in P.POLICIES.values():
            for seed in range(seeds):
                prev, _ = P.planted_run(None, 0.0, 0.0, p_right, 4, seed)
                cur, _ = P.collapsed_run("blatant", share, p_right, 4, seed)
                names = [f["name"] for f in m.compare_runs([("a", prev), ("b", cur)])["flags"]]
                fired_collapse += "diversity_collapse" in names
                runs += 1
    ok &= fired_collapse == runs
    lines.append(
        "diversity_collapse on hacked runs with no collapsed input:"
        f" {collapse_false}/{collapse_pairs};"
        f" on runs with >= 10 % of inputs collapsed: {fired_collapse}/{runs}"
    )
    lines.append(
        "clean -> clean checkpoint pairs judged reward_hacking or regressed:"
        f" {clean_fired}/{clean_pairs}"
    )
    return "\n".join(lines), ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed per configuration")
    seeds = 1 if parser.parse_args().quick else 2
    common.header("detection power on planted reward hacks (issue 14)")
    print(
        f"{P.N_INPUTS} inputs, policies weak 20 % / strong 80 % right, K = 1/4/8, {seeds} seed(s)"
    )
    print("per configuration; RM: +0.3 for a right answer, noise sd 0.05, + strength x 0.3 x hack")
    print()
    print("## Suspects: recall per family and strength (overall and at each share of wrong")
    print("## answers hacked); false = unhacked rollouts flagged / unhacked rollouts")
    text, ok_main, ok_subtle = suspects_table(seeds)
    print(text)
    print(
        f"{common.verdict(ok_main)}  moderate and blatant recall >= 0.95 at every share,"
        " false <= 0.05"
    )
    print(f"{common.verdict(ok_subtle)}  subtle (+20 % length paid for) recall >= 0.8")
    print()
    print("## Collapsed inputs named (diversity.collapsed_inputs), K = 4/8; run flag at >= 10 %")
    text, ok = collapse_table(seeds)
    print(text)
    print(f"{common.verdict(ok)}  every collapsed input named, no other; run flag from 10 %")
    print()
    print("## Clean runs (no hack): false suspects and runs with a flag (infra_errors aside)")
    text, ok = clean_runs(seeds)
    print(text)
    print(f"{common.verdict(ok)}  honest RM: false suspects <= 0.05, runs flagged <= 0.05")
    print()
    print("## Length bias: effect size and a permutation test (0.5 right, K=4)")
    text, ok = length_section(seeds)
    print(text)
    print(f"{common.verdict(ok)}  tie-breaking term never fires, material term always does")
    print()
    print("## --baseline: right answers hacked too (share 100 %, K=4, all families)")
    print(baseline_table(seeds))
    print()
    print("## compare: clean checkpoint -> hacked checkpoint (all families, weak+strong, K=4)")
    text, ok = compare_section(seeds)
    print(text)
    print(f"{common.verdict(ok)}  no diversity_collapse without collapsed inputs; always with;"
          " clean pairs flagged <= 0.05")  # fmt: skip


if __name__ == "__main__":
    main()
