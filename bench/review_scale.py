"""Checkpoint review at scale (issue 16): `rlenv compare` on 10 checkpoints x 500 inputs.

Writes 10 synthetic run directories (500 inputs x 2 rollouts, answers growing with the step,
verdicts flipping for some inputs, a composite reward of two components), runs the real
`rlenv compare` on them, and loads compare.html in headless Chromium over the DevTools
protocol: time to the load event, time to apply a filter, page size, DOM elements after load
(the figure the machine's load does not change), rows shown, requests made.

    .venv/bin/python bench/review_scale.py [--checkpoints 10] [--inputs 500]

Prints figures and PASS/MISS against the targets (page under 5 MB, loaded within 3 s, no
network request); always exits 0.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from rlenv.results import ResultsWriter, seal  # noqa: E402
from rlenv.summary import build_summary  # noqa: E402

RLENV = Path(sys.executable).parent / "rlenv"
WORDS = ["the", "answer", "is", "clearly", "found", "in", "the", "source", "as", "stated"]


def write_run(directory: Path, step: int, inputs: int, rollouts: int) -> None:
    rng = random.Random(step)
    meta = {
        "env": {"name": "bench", "version": 1, "fingerprint": "b" * 64},
        "model": {"uri": f"python:bench:checkpoint_{step}"},
        "decoding": {"temperature": 1.0, "seed": 0},
        "rollouts_per_input": rollouts,
        "limit": None,
    }
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps(meta, sort_keys=True))
    records = []
    for index in range(inputs):
        for rollout in range(rollouts):
            passed = rng.random() < 0.5 + 0.03 * step
            style = round(rng.random() * (0.5 + 0.05 * step), 6)
            padding = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4 * step)))
            answer = f"{'right' if passed else 'wrong'} {index} {padding}".strip()
            record = {
                "input_id": f"in-{index:04d}", "input_index": index, "rollout": rollout,
                "seed": index * 10 + rollout, "model": meta["model"]["uri"], "status": "ok",
                "error": None,
                "messages": [{"role": "user", "content": f"question {index}"},
                             {"role": "assistant", "content": answer}],
                "tool_calls": [], "answer": answer,
                "verifiers": [{"name": "v", "type": "exact", "passed": passed,
                               "score": float(passed), "detail": None}],
                "passed": passed, "reward": round(float(passed) + style, 6),
                "rewards": {"correct": float(passed), "style": style,
                            "total": round(float(passed) + style, 6)},
                "usage": {"completion_tokens": len(answer.split())}, "world": {},
            }  # fmt: skip
            records.append(seal(record))
    writer = ResultsWriter(directory / "results.jsonl")
    for record in records:
        writer.write(record)
    writer.close()
    prepared = SimpleNamespace(inputs=list(range(inputs)))
    summary = build_summary(prepared, meta, records, meta["model"]["uri"])  # type: ignore[arg-type]
    (directory / "summary.json").write_text(json.dumps(summary, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--inputs", type=int, default=500)
    args = parser.parse_args(argv)
    common.header("review_scale: rlenv compare at 10 checkpoints x 500 inputs, in Chromium")
    root = Path(tempfile.mkdtemp(prefix="rlenv-bench-review-"))
    try:
        return _bench(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _bench(root: Path, args: argparse.Namespace) -> int:
    runs = [root / f"step-{100 * (i + 1)}" for i in range(args.checkpoints)]
    for i, run in enumerate(runs):
        write_run(run, i, args.inputs, 2)
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [str(RLENV), "compare", *map(str, runs), "--out", str(root / "cmp"), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(done.stderr[-2000:])
        return 0
    result = json.loads(done.stdout)
    html = Path(result["html"])
    size = html.stat().st_size
    shown = len(result["generations"]["rows"])
    print(f"{args.checkpoints} checkpoints x {args.inputs} inputs x 2 rollouts")
    print(f"rlenv compare        {seconds:.1f} s wall, {cpu:.1f} s CPU (user+sys), whole process")
    print(f"compare.html         {size / 1e6:.2f} MB, {shown} inputs side by side")
    text = html.read_text(encoding="utf-8")
    for blob in ("samples-data", "generations-data"):
        if f'id="{blob}">' in text:
            inner = text.split(f'id="{blob}">', 1)[1].split("</script>", 1)[0]
            print(f"  {blob:<18} {len(inner.encode()) / 1e6:.2f} MB of JSON")
    figures: dict[str, Any] = {}
    try:
        from tests.cdp import drive
        from tests.test_report import CHROMIUM
    except ImportError as exc:
        print(f"chromium             skipped ({exc})")
        return 0
    if not CHROMIUM.exists():
        print("chromium             skipped (/usr/bin/chromium missing)")
        return 0

    async def measure(page: Any) -> dict[str, Any]:
        timing = await page.evaluate(
            "JSON.stringify(performance.getEntriesByType('navigation')[0].toJSON())"
        )
        nav = json.loads(timing)
        # click, then wait two animation frames: the filtered page has been styled and painted
        filtered = await page.evaluate(
            "new Promise(done => { const t0 = performance.now();"
            " document.querySelector('a[data-filter=changed]').click();"
            " requestAnimationFrame(() => requestAnimationFrame("
            " () => done(performance.now() - t0))); })",
            awaitPromise=True,
        )
        visible = await page.evaluate(
            "[...document.querySelectorAll('tr.gen-row')].filter(r => r.offsetParent !== null)"
            ".length"
        )
        nodes = await page.evaluate("document.getElementsByTagName('*').length")
        # the sample browser: a text search over every rollout of every checkpoint
        searched = await page.evaluate(
            "new Promise(done => { const t0 = performance.now();"
            " const box = document.getElementById('sb-text');"
            " if (!box) { done([null, null]); return; } box.value = 'right 42 ';"
            " box.dispatchEvent(new Event('change', {bubbles: true}));"
            " requestAnimationFrame(() => requestAnimationFrame(() => done([performance.now() - t0,"
            " Number(document.getElementById('sb-count').dataset.matching)]))); })",
            awaitPromise=True,
        )
        return {
            "load_ms": nav["loadEventEnd"],
            "filter_ms": filtered,
            "visible": visible,
            "nodes": nodes,
            "search_ms": searched[0],
            "search_rows": searched[1],
        }

    figures, page = drive(html.resolve().as_uri(), root / "profile", measure)
    print(f"page load            {figures['load_ms']:.0f} ms to the load event (Chromium)")
    print(f"filter 'changed'     {figures['filter_ms']:.0f} ms, {figures['visible']} rows shown")
    print(f"DOM elements         {figures['nodes']} after load and the filter")
    if figures["search_ms"] is None:
        print("search every rollout (the page has no sample browser)")
    else:
        ms, rows = figures["search_ms"], figures["search_rows"]
        print(f"search every rollout {ms:.0f} ms, {rows} match")
    print(f"requests             {len(page.requests)} (the page itself)")
    print(f"console/errors       {len(page.console)}/{len(page.errors)}")
    print(f"{'PASS' if size < 5e6 else 'MISS'} page under 5 MB")
    print(f"{'PASS' if figures['load_ms'] < 3000 else 'MISS'} loaded within 3 s")
    print(f"{'PASS' if len(page.requests) == 1 else 'MISS'} no network request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
