"""Throughput of `rlenv run` against a loopback OpenAI-compatible server with a fixed latency.

The server (`--latency-ms`: every request waits that long before its reply) runs in its own
process. It is bench/lean_chat_server.py: tests/chat_server.py's replies from one event loop,
~0.05 ms of CPU per request where the tests' threaded server takes ~0.28 ms (at 256 in flight
and 100 ms that server alone kept ~45 % of one of this machine's two cores busy: a model server
is on another machine in use, and its CPU here was counted against rlenv). `--server threaded`
measures with the tests' server throughout; without it, the 256-in-flight, 100 ms run is also
made once with the threaded server and printed below the targets, for comparison with earlier
outputs. The env has no tools and one verifier, so each rollout is one
chat request. `rlenv run --model openai:bench --base-url URL --concurrency C` for C in 1, 8, 64,
256; the best a client can do is C / latency requests per second (the limit).

Throughput is measured from the server's request arrival times, dropping the first C and the
last C requests (ramp-up and drain): rate = (n - 2C) / (t_(n-C) - t_C). This
is the steady state, with rlenv's start (spawning workers, loading the spec) and its end
(summary, digest) left out; the whole-process rate (rollouts / wall time) is printed beside it.
Target: steady-state throughput at C=64 and C=256 >= 90 % of the limit, at 100 ms and at 500 ms
latency. Beside it, the server's own ceiling: a bare client (no rlenv) firing the same load at
the same server, so a miss can be told apart from the server's (or the machine's) limit: the
better of aiohttp (what the provider uses for HTTPS and proxies) and `rlenv.providers.http1`
(its plain-HTTP client, used here); and httpx split over 8 pools (what rlenv's provider used
before aiohttp) for contrast. The server and rlenv share this machine's cores.

CPU per rollout, in the same steady-state window (from the C-th to the (n-C)-th arrival): the
orchestrator's own CPU (the `rlenv run` process: event loop, HTTP client, checks of each
worker reply, results line, metrics tally) and the frozen-world workers' (grading each
rollout's `finish`), read from /proc every 20 ms (`CpuSampler`) and
divided by the rollouts the window counts. Issue 30: halve the orchestrator's.
Run: `.venv/bin/python bench/concurrency.py [--quick] [--latency-ms MS ...]`.

A/B of CPU per rollout between source trees at the same load (a shared machine's throughput
measures its load): `--ab TREE,TREE[,...] --ab-concurrency C --rounds N` runs each tree in turn
(rlenv imported from TREE through PYTHONPATH, workers included), N rounds, and prints each run
and the medians.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGET = 0.90
CONCURRENCIES = (1, 8, 64, 256)
TARGET_CONCURRENCIES = (64, 256)
LATENCIES_MS = (100.0, 500.0)  # --quick: the first only
SECONDS_PER_RUN = 4.0  # seconds of requests at the limit for each run (quick: 2)
# the server's ceiling: the best of aiohttp and rlenv's own plain-HTTP client used bare
CLIENT_KINDS = ("httpx-8-pools", "aiohttp", "http1")
SERVER = "lean"  # --server: the chat server every run of this benchmark uses (common.SERVER_KINDS)
BODY = {
    "model": "bench",
    "messages": [{"role": "user", "content": "echo k0000001"}],
    "temperature": 0.0,
    "max_tokens": 512,
    "seed": 1,
}


def steady_rate(times: list[float], concurrency: int) -> tuple[float, int]:
    """Arrivals per second from the C-th request to the (n-C)-th; and how many that counts.

    Requests arrive in waves of up to C (a closed loop), so the window ends at the arrival that
    follows it: rate = (arrivals in [t_C, t_(n-C))) / (t_(n-C) - t_C), unbiased for waves.
    """
    times = sorted(times)
    start, end = (
        (concurrency, len(times) - concurrency)
        if len(times) > 4 * concurrency
        else (0, len(times) - 1)
    )
    if end <= start or times[end] == times[start]:
        return float("nan"), 0
    return (end - start) / (times[end] - times[start]), end - start


def run_rlenv(root: Path, latency_ms: float, concurrency: int, seconds: float) -> list[str]:
    """One `rlenv run` at a concurrency against a fresh server; a table row."""
    limit = concurrency / (latency_ms / 1000)
    rollouts = max(2 * concurrency + 10, int(limit * seconds))
    spec = common.build_env(root / f"env-{latency_ms:.0f}-{concurrency}", rollouts)
    with common.chat_server(latency_ms, SERVER) as server, CpuSampler(server.pid) as sampler:
        server_cpu = server.cpu_s()
        measured = common.measure(
            common.rlenv_run(
                spec,
                root / f"out-{latency_ms:.0f}-{concurrency}",
                "--model",
                "openai:bench",
                "--base-url",
                server.base_url,
                "--concurrency",
                str(concurrency),
            ),
        )
        measured.check()
        server_cpu = server.cpu_s() - server_cpu
        times = common.arrival_times(server)
    summary = json.loads(measured.stdout)
    if summary["counts"] != {"ok": rollouts} or len(times) != rollouts:
        raise RuntimeError(f"unexpected run: {summary['counts']}, {len(times)} requests")
    rate, window = steady_rate(times, concurrency)
    orchestrator_ms, workers_ms = cpu_per_rollout(sampler.series, times, concurrency)
    whole = rollouts / measured.wall_s
    print(
        f"  ... {latency_ms:.0f} ms, concurrency {concurrency}: {rate:.1f} req/s steady,"
        f" {measured.wall_s:.1f}s whole",
        flush=True,
    )
    return [
        f"{latency_ms:.0f}",
        f"{concurrency}",
        f"{rollouts}",
        f"{limit:.0f}",
        f"{rate:.1f}",
        f"{rate / limit * 100:.1f}%",
        f"{window}",
        f"{measured.wall_s:.1f}",
        f"{whole:.1f}",
        f"{measured.sum_peak_mb:.0f}",
        f"{measured.cpu_s:.1f}",
        f"{orchestrator_ms:.3f}",
        f"{workers_ms:.3f}",
        f"{server_cpu:.1f}",
        f"{(measured.cpu_s + server_cpu) / measured.wall_s:.2f}",
    ]


def _own_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads, not its children)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Every 20 ms, the CPU of the process this benchmark started (other than `skip`, the chat
    server) and of its descendants: `series` gets (time.monotonic(), that process's own CPU
    seconds, its descendants' own CPU seconds, each process's last reading summed)."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.series: list[tuple[float, float, float]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        seen: dict[int, float] = {}
        root: int | None = None
        while not self.done.wait(0.02):
            if root is None:
                started = [pid for pid in common._children(os.getpid()) if pid != self.skip]
                if not started:
                    continue
                root = started[0]
            for pid in common._tree(root):
                used = _own_cpu_s(pid)
                if used is not None:
                    seen[pid] = used
            own = seen.get(root, 0.0)
            self.series.append((time.monotonic(), own, sum(seen.values()) - own))


def cpu_per_rollout(
    series: list[tuple[float, float, float]], times: list[float], concurrency: int
) -> tuple[float, float]:
    """Milliseconds of CPU per rollout in `steady_rate`'s window: the orchestrator's own, and
    its workers' (NaN when the run was too short to sample the window)."""
    times = sorted(times)
    start, end = (
        (concurrency, len(times) - concurrency)
        if len(times) > 4 * concurrency
        else (0, len(times) - 1)
    )
    inside = [sample for sample in series if times[start] <= sample[0] <= times[end]]
    if end <= start or len(inside) < 2:
        return float("nan"), float("nan")
    first, last = inside[0], inside[-1]
    # the requests that arrived between the first and the last sample (in steady state, as
    # many rollouts end as begin)
    rollouts = bisect.bisect_left(times, last[0]) - bisect.bisect_left(times, first[0])
    if rollouts <= 0:
        return float("nan"), float("nan")
    return (
        (last[1] - first[1]) / rollouts * 1000,
        (last[2] - first[2]) / rollouts * 1000,
    )


def run_client(kind: str, latency_ms: float, concurrency: int) -> list[str]:
    """The HTTP client alone (no rlenv) at a concurrency: the ceiling a provider built on it has."""
    limit = concurrency / (latency_ms / 1000)
    requests = concurrency * 10
    with common.chat_server(latency_ms, SERVER) as server:
        common.measure(
            [
                sys.executable,
                __file__,
                "_client",
                kind,
                server.base_url,
                str(concurrency),
                str(requests),
            ],
            pss=False,
        ).check()
        times = common.arrival_times(server)
    rate, _ = steady_rate(times, concurrency)
    return [
        kind,
        f"{latency_ms:.0f}",
        f"{concurrency}",
        f"{requests}",
        f"{limit:.0f}",
        f"{rate:.1f}",
        f"{rate / limit * 100:.1f}%",
    ]


async def _client(kind: str, base_url: str, concurrency: int, requests: int) -> None:
    """`concurrency` tasks sharing `requests` chat requests through one client configuration."""
    import asyncio
    import itertools

    url = f"{base_url}/v1/chat/completions"
    queue = iter(range(requests))
    if kind == "http1":  # rlenv's client for a plain-HTTP endpoint (rlenv.providers.http1)
        from urllib.parse import urlsplit

        import orjson

        from rlenv.providers.http1 import Http1Pool

        parts = urlsplit(url)
        headers = {"Content-Type": "application/json"}
        pool = Http1Pool(
            str(parts.hostname), int(parts.port or 80), parts.path, headers, limit=256, timeout=60
        )
        body = orjson.dumps(BODY)

        async def http1_task() -> None:
            for _ in queue:
                orjson.loads((await pool.post(body)).content)

        await asyncio.gather(*(http1_task() for _ in range(concurrency)))
        await pool.close()
        return
    if kind == "aiohttp":
        import aiohttp

        connector = aiohttp.TCPConnector(limit=max(256, concurrency))
        async with aiohttp.ClientSession(connector=connector) as session:

            async def aiohttp_task() -> None:
                for _ in queue:
                    async with session.post(url, json=BODY) as response:
                        await response.json()

            await asyncio.gather(*(aiohttp_task() for _ in range(concurrency)))
        return
    import httpx

    pools = 8 if kind == "httpx-8-pools" else 1
    per_pool = 256 if pools == 1 else max(1, concurrency // pools)
    clients = [
        httpx.AsyncClient(
            timeout=httpx.Timeout(60.0, pool=None),
            limits=httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool),
        )
        for _ in range(pools)
    ]
    assignment = itertools.cycle(clients)

    async def httpx_task(client: httpx.AsyncClient) -> None:
        for _ in queue:
            (await client.post(url, json=BODY)).json()

    await asyncio.gather(*(httpx_task(next(assignment)) for _ in range(concurrency)))
    for client in clients:
        await client.aclose()


def run_ab(trees: list[str], concurrency: int, rounds: int, latency_ms: float) -> None:
    """Interleaved runs of `run_rlenv` per tree (PYTHONPATH=TREE), CPU per rollout medians."""
    import statistics

    seconds = 2.0 if concurrency <= 64 else 1.5
    seen: dict[str, list[list[str]]] = {tree: [] for tree in trees}
    saved = os.environ.get("PYTHONPATH")
    try:
        with common.temp_dir("bench-concurrency-ab-") as root:
            for round_ in range(rounds):
                for number, tree in enumerate(trees):
                    os.environ["PYTHONPATH"] = tree
                    load = os.getloadavg()[0]
                    row = run_rlenv(root / f"{round_}-{number}", latency_ms, concurrency, seconds)
                    seen[tree].append(row)
                    print(
                        f"  {tree}: orch {row[11]} workers {row[12]} ms/rollout,"
                        f" {row[4]} req/s, load {load:.1f}",
                        flush=True,
                    )
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    rows = []
    for tree, runs in seen.items():
        orch = statistics.median(float(row[11]) for row in runs)
        workers = statistics.median(float(row[12]) for row in runs)
        rate = statistics.median(float(row[4]) for row in runs)
        rows.append([tree, f"{concurrency}", f"{orch:.3f}", f"{workers:.3f}", f"{rate:.1f}"])
    print()
    print(
        common.table(
            ["tree", "C", "median orch ms", "median workers ms", "median steady req/s"], rows
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 ms only, shorter runs")
    parser.add_argument(
        "--latency-ms",
        type=float,
        action="append",
        help="server latency (repeatable; default 100 and 500, quick 100)",
    )
    parser.add_argument("--ab", help="TREE,TREE,...: A/B of CPU per rollout (see above)")
    parser.add_argument("--ab-concurrency", type=int, default=256)
    global SERVER
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server",
        choices=common.SERVER_KINDS,
        default=SERVER,
        help="the chat server: lean (one event loop; the default) or threaded (tests' server)",
    )
    args = parser.parse_args()
    SERVER = args.server
    if args.ab:
        common.header("concurrency A/B: CPU per rollout, trees interleaved at the same load")
        run_ab(args.ab.split(","), args.ab_concurrency, args.rounds, 100.0)
        return
    latencies = args.latency_ms or (LATENCIES_MS[:1] if args.quick else LATENCIES_MS)
    seconds = 2.0 if args.quick else SECONDS_PER_RUN
    common.header("concurrency: rlenv run against a chat server with a fixed latency")

    rows, client_rows, verdicts = [], [], []
    with common.temp_dir("bench-concurrency-") as root:
        warm = common.build_env(root / "warm", 4)
        with common.chat_server(0, SERVER) as server:
            common.measure(
                common.rlenv_run(
                    warm,
                    root / "warm-out",
                    "--model",
                    "openai:bench",
                    "--base-url",
                    server.base_url,
                )
            ).check()
        for latency_ms in latencies:
            rates = {}
            for concurrency in CONCURRENCIES:
                rows.append(run_rlenv(root, latency_ms, concurrency, seconds))
                rates[concurrency] = float(rows[-1][4])
            for top in TARGET_CONCURRENCIES:
                ceiling = float("nan")
                for kind in CLIENT_KINDS:
                    client_rows.append(run_client(kind, latency_ms, top))
                    if kind in ("aiohttp", "http1"):
                        ceiling = max(float(client_rows[-1][5]), ceiling if ceiling > 0 else 0.0)
                limit = top / (latency_ms / 1000)
                rate = rates[top]
                verdicts.append(
                    f"target: steady-state throughput at concurrency {top}, latency"
                    f" {latency_ms:.0f} ms >= {TARGET * 100:.0f}% of {limit:.0f} req/s:"
                    f" {rate:.1f} req/s ({rate / limit * 100:.1f}%; server ceiling"
                    f" {ceiling:.1f} req/s = {ceiling / limit * 100:.1f}%, rlenv at"
                    f" {rate / ceiling * 100:.1f}% of it)  {common.verdict(rate >= TARGET * limit)}"
                )
    print()
    print(
        "rlenv run --model openai:bench --concurrency C; limit = C / latency (one request per"
        " rollout)"
    )
    print(
        "CPU: user+system seconds of the rlenv process tree and of the server during the run;"
        f" cores busy = both / wall (this machine has {os.cpu_count()}); orch / workers"
        " ms/rollout: CPU of the orchestrator process / of its frozen-world workers per rollout"
        " in the steady-state window"
    )
    print(
        common.table(
            [
                "latency ms",
                "C",
                "rollouts",
                "limit req/s",
                "steady req/s",
                "of limit",
                "window",
                "wall s",
                "whole req/s",
                "sum peak RSS MB",
                "rlenv CPU s",
                "orch ms/rollout",
                "workers ms/rollout",
                "server CPU s",
                "cores busy",
            ],
            rows,
        )
    )
    print()
    print(
        "the HTTP client alone (no rlenv), same server: the server's ceiling (the better of"
        " aiohttp and http1)"
    )
    print(
        "(httpx-8-pools: 8 httpx AsyncClients of C/8 connections, tasks spread over them;"
        " aiohttp: one ClientSession, what rlenv's provider uses for HTTPS and proxies;"
        " http1: rlenv's own plain-HTTP client, what it uses here)"
    )
    print(
        common.table(
            ["client", "latency ms", "C", "requests", "limit req/s", "steady req/s", "of limit"],
            client_rows,
        )
    )
    print()
    print("\n".join(verdicts))
    if SERVER != "threaded" and 100.0 in latencies:
        print()
        print("the same run with tests/chat_server.py (a thread per connection) as the server:")
        SERVER = "threaded"
        with common.temp_dir("bench-concurrency-threaded-") as root:
            row = run_rlenv(root, 100.0, 256, seconds)
        print(
            f"  concurrency 256, latency 100 ms: {row[4]} req/s steady ({row[5]} of the limit),"
            f" orchestrator {row[11]} ms/rollout, server CPU {row[13]} s, cores busy {row[14]}"
        )


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "_client":
        import asyncio

        asyncio.run(_client(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    else:
        main()
