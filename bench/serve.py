"""Throughput of `rlenv serve` (episodes per second through openenv-core's client at 1, 16 and
64 concurrent sessions) beside `rlenv run` doing the same kind of work.

The env (tests/serving.py `tool_env`, its inputs widened to 64) has one tool: every episode is
reset, one replayed tool call, the final answer (graded by an exact-match verifier). The served
side is one `rlenv serve --workers 2` process; C WebSocket clients (openenv-core's
GenericEnvClient) each play episodes back to back until 512 episodes (--quick 128) are done,
timed from the first reset to the last graded answer (the server's start is left out; it is
printed apart). `rlenv run` plays the same episodes with the env's python policy (the same
actions) at `--concurrency C` (its workers: one per core, 2 here): its rate over the whole
process of 1024 episodes (16 per input; --quick 512), and steady: (1024 - 64) / (wall of 1024
- wall of 64), both runs at the same concurrency, so its start and end cancel out.
Both share this machine's cores with the clients. No target: the figures are for the README.
Run: `.venv/bin/python bench/serve.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

from tests import serving  # noqa: E402
from tests.conftest import sha256  # noqa: E402

CONCURRENCIES = (1, 16, 64)
INPUTS = 64
WORKERS = 2
RUN_PER_INPUT = 16  # rlenv run's longer run: 1024 episodes (--quick 512), so its start is small


def bench_env(root: Path, episodes_per_input: int) -> Path:
    """The tool env with INPUTS held-out inputs and `episodes_per_input` rollouts each."""
    spec = serving.tool_env(root)
    document = json.loads(spec.read_text())
    rows = [{"id": f"h{n}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(INPUTS)]
    table = root / "inputs.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    document["inputs"] = {"path": "inputs.jsonl", "sha256": sha256(table)}
    document["rollouts"] = episodes_per_input
    spec.write_text(json.dumps(document))
    return spec


async def _client(url: str, queue: asyncio.Queue[int]) -> int:
    from openenv.core.generic_client import GenericEnvClient

    done = 0
    async with GenericEnvClient(base_url=url, message_timeout_s=600) as env:
        while True:
            try:
                number = queue.get_nowait()
            except asyncio.QueueEmpty:
                return done
            word = f"w{number % INPUTS}"
            await env.reset(input_id=f"h{number % INPUTS}")
            await env.step(serving.tool_call(word))
            last = await env.step({"content": word})
            assert last.done and last.reward == 1.0, last
            done += 1


async def _play(url: str, episodes: int, concurrency: int) -> int:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for number in range(episodes):
        queue.put_nowait(number)
    counts = await asyncio.gather(*(_client(url, queue) for _ in range(concurrency)))
    return sum(counts)


def served_rates(spec: Path, work: Path, episodes: int) -> tuple[float, dict[int, float]]:
    """(server start seconds, {C: episodes/s})."""
    rates: dict[int, float] = {}
    started = time.perf_counter()
    options = ("--workers", str(WORKERS), "--max-sessions", "128")
    with serving.served(spec, work / "served", *options) as (url, _):
        start_s = time.perf_counter() - started
        asyncio.run(_play(url, 4, 1))  # warm: the workers' first calls
        for concurrency in CONCURRENCIES:
            began = time.perf_counter()
            done = asyncio.run(_play(url, episodes, concurrency))
            rates[concurrency] = done / (time.perf_counter() - began)
    return start_s, rates


def _timed(command: list[str]) -> float:
    """Wall seconds of a real `rlenv` process (it must succeed)."""
    began = time.perf_counter()
    subprocess.run(
        command,
        cwd=common.ROOT,
        env=common.bench_env(),
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - began


def run_rates(spec: Path, work: Path, per_input: int) -> dict[int, tuple[float, float]]:
    """{C: (whole-process episodes/s, steady episodes/s)} of `rlenv run` over `per_input`
    rollouts of every input: the steady rate is the difference of that run and a run of one
    rollout per input at the same concurrency (their starts and ends cancel out)."""
    episodes = INPUTS * per_input
    rates: dict[int, tuple[float, float]] = {}
    for concurrency in CONCURRENCIES:
        options = ("--concurrency", str(concurrency))
        small = _timed(
            common.rlenv_run(spec, work / f"one-{concurrency}", *options, "--rollouts", "1")
        )
        seconds = _timed(
            common.rlenv_run(
                spec, work / f"run-{concurrency}", *options, "--rollouts", str(per_input)
            )
        )
        extra = episodes - INPUTS
        steady = extra / (seconds - small) if seconds > small else float("nan")
        rates[concurrency] = (episodes / seconds, steady)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 episodes per figure")
    args = parser.parse_args()
    common.header("rlenv serve: episodes per second beside rlenv run")
    per_input = 2 if args.quick else 8
    episodes = INPUTS * per_input
    run_per_input = RUN_PER_INPUT // (2 if args.quick else 1)
    work = Path(tempfile.mkdtemp(prefix="rlenv-bench-serve-"))
    try:
        spec = bench_env(work / "env", per_input)
        start_s, served = served_rates(spec, work, episodes)
        ran = run_rates(spec, work, run_per_input)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"work: each episode is a reset, 1 replayed tool call and a graded answer; {WORKERS}"
        f" workers. rlenv serve: {episodes} episodes per figure (openenv-core clients on this"
        f" machine); rlenv run: {INPUTS * run_per_input} episodes, steady rate against"
        f" {INPUTS} (n/a: the difference was lost in the machine's noise)"
    )
    print(f"rlenv serve start (not in its rates): {start_s:.1f} s\n")

    def rate(value: float) -> str:
        return "n/a" if value != value else f"{value:.1f}"

    rows = [(c, rate(served[c]), rate(ran[c][0]), rate(ran[c][1])) for c in CONCURRENCIES]
    headers = ("sessions", "serve ep/s", "run ep/s (whole process)", "run ep/s (steady)")
    print(common.table(headers, rows))


if __name__ == "__main__":
    main()
