"""What embedding each text alone costs (issue #26 item 6): the reward model's MiniLM embeddings
of N held-out preference texts, in batches of 32 as before (padded to the longest of each batch)
and one text at a time as now, on one torch thread; and how far the batched ones were from the
ones each text gets alone.

    PYTHONPATH=. python bench/rm_batching.py [N]

`rlenv run` scores each rollout alone, so a run pays nothing; batch callers (`rlenv rm train`,
`rm evaluate`, calibration, probes) pay the ratio printed here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main(count: int = 192) -> None:
    import torch

    from rlenv.rm.embed import clear_cache, embed, load_model
    from rlenv.rm.train import model_text

    rows = [
        json.loads(line)
        for line in (ROOT / "fixtures" / "search" / "prefs_heldout.jsonl").read_text().splitlines()
    ]
    texts = [
        model_text(row["prompt"], row[side]) for row in rows for side in ("chosen", "rejected")
    ]
    texts = list(dict.fromkeys(texts))[:count]
    model = load_model()
    torch.set_num_threads(1)
    model.encode(texts[:4], batch_size=32, convert_to_numpy=True)  # warm up
    started = time.perf_counter()
    batched = model.encode(
        texts, batch_size=32, convert_to_numpy=True, normalize_embeddings=True,
        show_progress_bar=False,
    )  # fmt: skip
    batched_s = time.perf_counter() - started
    clear_cache()
    started = time.perf_counter()
    alone = embed(texts)
    alone_s = time.perf_counter() - started
    gap = float(np.max(np.abs(alone - batched.astype(np.float64))))
    print(f"texts                 {len(texts)}")
    print(
        f"batches of 32 (before) {batched_s:.2f} s  ({1000 * batched_s / len(texts):.1f} ms/text)"
    )
    print(f"one at a time (now)    {alone_s:.2f} s  ({1000 * alone_s / len(texts):.1f} ms/text)")
    print(f"ratio                 {alone_s / batched_s:.2f}x")
    print(f"max |batched - alone| {gap:.2e} (per embedding component)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 192)
