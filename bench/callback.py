"""Wall time of one checkpoint evaluation (what RlenvCallback and `rlenv watch` do per save) on
the bundled search env: a tiny GPT-2 checkpoint built here (no download) scored with the `hf:`
provider, KL against a second tiny checkpoint, every held-out input x 1 rollout, the spec's
decoding (up to 256 new tokens). Run: `.venv/bin/python bench/callback.py [--limit N]`.

Prints the wall time of the evaluation (process already warm: the first checkpoint) and of a
second one (another step), and the run directories; then the evaluation time per checkpoint
(the second: the first also loads torch and transformers) and per rollout. No target: the
figure is for the README (issue 30: what evaluating during training costs the trainer).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import common  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    common.header("callback: one checkpoint's evaluation during training (search env, hf:)")
    from rlenv.watch import evaluate_checkpoint
    from tests.tiny_models import build_checkpoint

    work = Path(tempfile.mkdtemp(prefix="rlenv-bench-callback-"))
    reference = build_checkpoint(work / "initial", seed=0)
    spec = ROOT / "envs" / "search.yaml"
    rows = []
    for step in (1, 2):
        checkpoint = build_checkpoint(
            work / f"checkpoint-{step}", seed=0, perturb_seed=step, scale=0.03
        )
        started = time.perf_counter()
        evaluation = evaluate_checkpoint(
            spec,
            checkpoint,
            step=step,
            out_root=work / "rlenv",
            reference=reference,
            limit=args.limit,
            rollouts=1,
        )
        rows.append(
            {
                "step": step,
                "wall_s": round(time.perf_counter() - started, 2),
                "rollouts": evaluation.summary["rollouts"],
                "run_dir": str(evaluation.run_dir),
            }
        )
        print(json.dumps(rows[-1]))
    steady = rows[-1]
    per_rollout = steady["wall_s"] / max(1, steady["rollouts"]) * 1000
    print(
        f"evaluation time per checkpoint: {steady['wall_s']:.2f} s wall for"
        f" {steady['rollouts']} rollouts ({per_rollout:.0f} ms per rollout; first checkpoint"
        f" {rows[0]['wall_s']:.2f} s, loading included)"
    )


if __name__ == "__main__":
    main()
