"""Wall time of one checkpoint evaluation (what RlenvCallback and `rlenv watch` do per save) on
the bundled search env: a tiny GPT-2 checkpoint built here (no download) scored with the `hf:`
provider, KL against a second tiny checkpoint, every held-out input x 1 rollout, the spec's
decoding (up to 256 new tokens). Run: `.venv/bin/python bench/callback.py [--limit N]`.

Prints the wall time of the evaluation (process already warm: the first checkpoint) and of a
second one (another step), and the run directories.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
