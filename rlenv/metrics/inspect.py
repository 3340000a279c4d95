"""Side by side: which inputs to show across checkpoints, and one cell per (input, run).

The inputs are a fixed, seeded sample (``n``), plus every input whose verdict changed between
neighbouring runs, plus each run's top reward-hacking suspects, plus (when the runs' collapsed
inputs are given) the first inputs each run newly collapsed. A cell is the input's first
scored rollout in that run: its answer, verdicts, reward, length, KL and its trajectory.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from rlenv.metrics._records import Record, _group, _key, _passed, _reward, _scored, _words
from rlenv.metrics.run import disagreements
from rlenv.seeding import derive_seed

TOP_SUSPECTS = 5
TOP_COLLAPSED = 20
"""Inputs newly collapsed in a run (not in the run before) added to the view, per run."""


def _cell(
    record: Record | None, suspects: set[tuple[str, int]], collapsed: set[str]
) -> dict[str, Any] | None:
    if record is None:
        return None
    raw_kl = record.get("kl")
    kl: dict[str, Any] = raw_kl if isinstance(raw_kl, dict) else {}
    k1 = kl.get("k1") if isinstance(kl.get("k1"), int | float) else kl.get("mean_k1")
    return {
        "rollout": int(record.get("rollout", 0)),
        "status": str(record.get("status", "ok")),
        "answer": record.get("answer"),
        "error": record.get("error"),
        "passed": _passed(record),
        "verifiers": [
            {"name": v.get("name"), "passed": v.get("passed"), "detail": v.get("detail")}
            for v in record.get("verifiers") or []
        ],
        "reward": _reward(record),
        "length": len(_words(record.get("answer"))),
        "kl_k1": k1 if isinstance(k1, int | float) else None,
        "suspect": _key(record) in suspects,
        "collapsed": _key(record)[0] in collapsed,
        "tool_calls": [
            {"name": c.get("name"), "arguments": c.get("arguments"), "fixture": c.get("fixture")}
            for c in record.get("tool_calls") or []
        ],
        "messages": record.get("messages") or [],
    }


def side_by_side(
    runs: Sequence[tuple[str, Iterable[Record]]],
    n: int = 20,
    seed: int = 0,
    collapsed: Sequence[Iterable[str]] | None = None,
) -> dict[str, Any]:
    """Rows (one per chosen input, in input order) of cells (one per run, None when the run
    has no scored rollout of it), with why each input was chosen and whether its verdict
    changed from the previous run (``changed[i]`` for run i > 0).

    ``collapsed``: per run, the inputs whose rollouts collapsed to near-identical answers
    (``diversity(...)["collapsed_inputs"]``); each cell says whether its input collapsed in
    that run, and up to TOP_COLLAPSED inputs per run that collapsed there and not in the run
    before are shown. Also returned: ``suspects``, per run, every suspect (input, rollout)."""
    collapsed_sets = [{str(i) for i in ids} for ids in collapsed or [()] * len(runs)]
    if len(collapsed_sets) != len(runs):
        raise ValueError(f"collapsed has {len(collapsed_sets)} entries for {len(runs)} runs")
    firsts: list[dict[str, Record]] = []
    suspect_keys: list[set[tuple[str, int]]] = []
    top: list[list[str]] = []
    order: dict[str, tuple[int, str]] = {}
    for _, records in runs:
        scored = _scored(list(records))
        first = {}
        for input_id, group in _group(scored):
            first[input_id] = min(group, key=lambda r: int(r.get("rollout", 0)))
            order.setdefault(input_id, (int(group[0].get("input_index", 0)), input_id))
        firsts.append(first)
        found = disagreements(scored).get("high_reward_failed") or []
        found = sorted(found, key=lambda s: (-float(s["reward"]), str(s["input_id"])))
        top.append([str(s["input_id"]) for s in found[:TOP_SUSPECTS]])
        suspect_keys.append({(str(s["input_id"]), int(s["rollout"])) for s in found})
    ids = sorted(order, key=lambda i: order[i])
    sampled = set(random.Random(derive_seed(seed, "inspect")).sample(ids, min(n, len(ids))))
    changed_ids = set()
    for prev, cur in zip(firsts[:-1], firsts[1:], strict=True):
        for input_id in ids:
            both = input_id in prev and input_id in cur
            if both and _passed(prev[input_id]) != _passed(cur[input_id]):
                changed_ids.add(input_id)
    suspect_ids = {input_id for ids_of_run in top for input_id in ids_of_run}
    collapsed_ids: set[str] = set()
    for index, now in enumerate(collapsed_sets):
        before = collapsed_sets[index - 1] if index else set()
        collapsed_ids.update([i for i in ids if i in now and i not in before][:TOP_COLLAPSED])
    rows = []
    for input_id in ids:
        why = [
            name
            for name, chosen in (
                ("sample", sampled),
                ("changed", changed_ids),
                ("suspect", suspect_ids),
                ("collapsed", collapsed_ids),
            )
            if input_id in chosen
        ]
        if not why:
            continue
        cells = [
            _cell(first.get(input_id), keys, gone)
            for first, keys, gone in zip(firsts, suspect_keys, collapsed_sets, strict=True)
        ]
        changed = [False] + [
            a is not None and b is not None and a["passed"] != b["passed"]
            for a, b in zip(cells[:-1], cells[1:], strict=True)
        ]
        rows.append({"input_id": input_id, "why": why, "cells": cells, "changed": changed})
    return {
        "runs": [name for name, _ in runs],
        "n_sample": n,
        "seed": seed,
        "rows": rows,
        "suspects": [sorted(keys) for keys in suspect_keys],
    }
