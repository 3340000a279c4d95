"""Throughput of `rlenv run` against a loopback OpenAI-compatible server with a fixed latency.

The server is tests/chat_server.py (`--latency-ms`: every request waits that long before its
reply), run in its own process. The env has no tools and one verifier, so each rollout is one
chat request. `rlenv run --model openai:bench --base-url URL --concurrency C` for C in 1, 8, 64;
the best a client can do is C / latency requests per second (the limit).

Throughput is measured from the server's request arrival times, dropping the first C and the
last C requests (ramp-up and drain): rate = (arrivals in the window - 1) / (last - first). This
is the steady state, with rlenv's start (spawning workers, loading the spec) and its end
(summary, digest) left out; the whole-process rate (rollouts / wall time) is printed beside it.
Target: steady-state throughput at C=64 >= 90 % of the limit.
Run: `.venv/bin/python bench/concurrency.py [--quick] [--latency-ms MS]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGET = 0.90
CONCURRENCIES = (1, 8, 64)
SECONDS_PER_RUN = 8.0  # steady-state seconds aimed for at each concurrency (quick: 3)


def steady_rate(times: list[float], concurrency: int) -> tuple[float, int]:
    """Arrivals per second between the C-th and the (n-C)-th request; and the window's size."""
    times = sorted(times)
    window = times[concurrency : len(times) - concurrency] if len(times) > 4 * concurrency \
        else times
    if len(window) < 2 or window[-1] == window[0]:
        return float("nan"), len(window)
    return (len(window) - 1) / (window[-1] - window[0]), len(window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--latency-ms", type=float, default=100.0,
                        help="the server's fixed per-request latency (default 100)")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    seconds = 3.0 if args.quick else SECONDS_PER_RUN
    common.header(f"concurrency: rlenv run against a chat server with {args.latency_ms:.0f} ms"
                  " latency")

    rows = []
    verdict_line = ""
    with common.temp_dir("bench-concurrency-") as root:
        warm = common.build_env(root / "warm", 4)
        with common.chat_server(0) as server:
            common.measure(common.rlenv_run(warm, root / "warm-out", "--model", "openai:bench",
                                            "--base-url", server.base_url)).check()
        for concurrency in CONCURRENCIES:
            limit = concurrency / latency
            rollouts = max(4 * concurrency + 20, int(limit * seconds))
            spec = common.build_env(root / f"env-{concurrency}", rollouts)
            with common.chat_server(args.latency_ms) as server:
                measured = common.measure(common.rlenv_run(
                    spec, root / f"out-{concurrency}", "--model", "openai:bench",
                    "--base-url", server.base_url, "--concurrency", str(concurrency)))
                measured.check()
                times = common.arrival_times(server)
            summary = json.loads(measured.stdout)
            if summary["counts"] != {"ok": rollouts} or len(times) != rollouts:
                raise RuntimeError(f"unexpected run: {summary['counts']}, {len(times)} requests")
            rate, window = steady_rate(times, concurrency)
            whole = rollouts / measured.wall_s
            rows.append([f"{concurrency}", f"{rollouts}", f"{limit:.0f}", f"{rate:.1f}",
                         f"{rate / limit * 100:.1f}%", f"{window}", f"{measured.wall_s:.1f}",
                         f"{whole:.1f}", f"{whole / limit * 100:.1f}%",
                         f"{measured.sum_peak_mb:.0f}"])
            print(f"  ... concurrency {concurrency}: {rate:.1f} req/s steady,"
                  f" {measured.wall_s:.1f}s whole", flush=True)
            if concurrency == max(CONCURRENCIES):
                ok = rate >= TARGET * limit
                verdict_line = (f"target: steady-state throughput at concurrency {concurrency}"
                                f" >= {TARGET * 100:.0f}% of {limit:.0f} req/s:"
                                f" {rate:.1f} req/s ({rate / limit * 100:.1f}%)"
                                f"  {common.verdict(ok)}")
    print()
    print(f"latency {args.latency_ms:.0f} ms; limit = concurrency / latency; one request per"
          " rollout")
    print(common.table(
        ["concurrency", "rollouts", "limit req/s", "steady req/s", "of limit", "window",
         "wall s", "whole req/s", "of limit", "sum peak RSS MB"], rows))
    print()
    print(verdict_line)


if __name__ == "__main__":
    main()
