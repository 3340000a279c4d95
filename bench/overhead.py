"""Per-rollout overhead of `rlenv run` against Inspect AI for the same number of samples.

rlenv: a bundled-style env built in a temp dir: N inputs, an instant python policy that makes
one tool call (the tool POSTs with a module-level `httpx.Client`; the HTTP is replayed from a
vcrpy YAML cassette of N distinct interactions) and then answers; one exact_match verifier.
`rlenv run SPEC --concurrency C` for C in 2 and 4, whole process.

Inspect: a Task with a MemoryDataset of N samples, solver generate(), scorer includes(), model
mockllm/model, `inspect_ai.eval(...)` with default log writing and max_connections = max_samples
= N, whole process, in the separate venv /tmp/venv-inspect (`INSPECT_VENV` to change).

The first rlenv run of an env builds the cassette's index (cached by the file's hash in
RLENV_CACHE_DIR, a temp dir of this benchmark's own); it is reported as "first run", and the
later runs, which load the index from the cache, are the ones compared with Inspect.

Targets: rlenv's 10k run at least 5x faster than Inspect's; rlenv peak memory <= 200 MB (sum
of the peak RSS of every process of the run: orchestrator + workers + helpers). On a miss, a
cProfile of the orchestrator (`--concurrency 1`) and of an in-process frozen-world worker is
printed. Run: `.venv/bin/python bench/overhead.py [--quick]` (`--quick`: 1k, --concurrency 2,
no Inspect warm-up, no profile).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

SPEEDUP_TARGET = 5.0
MEMORY_TARGET_MB = 200.0
CONCURRENCIES = (2, 4)

INSPECT_SCRIPT = '''\
"""N samples through Inspect: MemoryDataset, generate(), includes(), mockllm/model."""

import sys

from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

n, log_dir = int(sys.argv[1]), sys.argv[2]
TEXT = "Default output from mockllm/model"  # mockllm's own default output


def outputs():
    # mockllm's default output, with usage filled in: without usage mockllm counts tokens with
    # tiktoken's o200k_base, which it downloads at first use (no network here: every sample
    # would fail). Setting usage is the branch mockllm itself takes when usage is given.
    while True:
        output = ModelOutput.from_content(model="mockllm/model", content=TEXT)
        output.usage = ModelUsage(
            input_tokens=3, output_tokens=len(TEXT), total_tokens=3 + len(TEXT)
        )
        yield output


samples = [Sample(input=f"echo k{i:07d}", target="Default output", id=i) for i in range(n)]
task = Task(dataset=MemoryDataset(samples), solver=generate(), scorer=includes())
model = get_model("mockllm/model", custom_outputs=outputs())
log = eval(task, model=model, log_dir=log_dir, max_connections=n, max_samples=n, display="none")[0]
accuracy = log.results.scores[0].metrics["accuracy"].value if log.results else None
print(log.status, len(log.samples or []), accuracy)
'''


def inspect_python() -> Path:
    return common.INSPECT_VENV / "bin" / "python"


def inspect_version() -> str:
    result = subprocess.run(
        [str(inspect_python()), "-c", "import inspect_ai; print(inspect_ai.__version__)"],
        capture_output=True,
        text=True,
        env=common.bench_env(),
    )
    return result.stdout.strip() or f"unavailable ({result.stderr.strip()[-200:]})"


def run_rlenv(spec: Path, root: Path, concurrency: int, expected: int) -> common.Measurement:
    out = root / f"out-c{concurrency}-{time.monotonic_ns()}"
    measured = common.measure(common.rlenv_run(spec, out, "--concurrency", str(concurrency)))
    measured.check()
    summary = json.loads(measured.stdout)
    hits = summary.get("fixtures", {}).get("hit", 0)
    passed = summary["pass_rate"]["value"]
    if summary["rollouts"] != expected or hits != expected or passed != 1.0:
        raise RuntimeError(
            f"unexpected run: {summary['counts']} fixtures {summary['fixtures']} pass rate {passed}"
        )
    return measured


def run_inspect(script: Path, root: Path, samples: int) -> common.Measurement:
    logs = root / f"inspect-logs-{samples}"
    measured = common.measure(
        [str(inspect_python()), script.name, str(samples), str(logs)],
        cwd=script.parent,
        timeout=1800,
    ).check()
    status, count, _ = measured.stdout.split()[-3:]
    if status != "success" or int(count) != samples:
        raise RuntimeError(f"inspect run did not finish: {measured.stdout[-500:]}")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="1k only, --concurrency 2 only, no profile"
    )
    args = parser.parse_args()
    sizes = [1000] if args.quick else [1000, 10000]
    concurrencies = CONCURRENCIES[:1] if args.quick else CONCURRENCIES
    common.header("overhead: rlenv run vs Inspect, whole process")
    print(f"inspect_ai {inspect_version()} in {common.INSPECT_VENV}")
    print("memory: sum of each process's peak RSS (VmHWM from /proc, sampled every 20 ms over")
    print("the whole process tree); PSS: peak of the sampled sum of Pss over the live tree")
    print()

    rows = []
    results: dict[tuple[str, int, int], common.Measurement] = {}
    specs: dict[int, Path] = {}
    with common.temp_dir("bench-overhead-") as root:
        warm = common.build_env(root / "warm", 10, policy="one_tool", tool=True)
        run_rlenv(warm, root, 2, 10)  # fills the bytecode cache; not reported
        script = root / "inspect_task.py"
        script.write_text(INSPECT_SCRIPT)
        if not args.quick:  # --quick relies on the bytecode cache an earlier run left
            run_inspect(script, root, 10)  # fills Inspect's bytecode cache too; not reported
        for samples in sizes:
            spec = common.build_env(root / f"env-{samples}", samples, policy="one_tool", tool=True)
            specs[samples] = spec
            measured = run_rlenv(spec, root, CONCURRENCIES[0], samples)
            results[("rlenv-cold", samples, CONCURRENCIES[0])] = measured
            rows.append(
                _row(f"rlenv --concurrency {CONCURRENCIES[0]}, first run", samples, measured)
            )
            print(f"  ... rlenv {samples} first run: {measured.wall_s:.1f}s", flush=True)
            for concurrency in concurrencies:
                measured = run_rlenv(spec, root, concurrency, samples)
                results[("rlenv", samples, concurrency)] = measured
                rows.append(_row(f"rlenv --concurrency {concurrency}", samples, measured))
                print(f"  ... rlenv {samples} c={concurrency}: {measured.wall_s:.1f}s", flush=True)
            measured = run_inspect(script, root, samples)
            results[("inspect", samples, 0)] = measured
            rows.append(_row(f"inspect max_samples={samples}", samples, measured))
            print(f"  ... inspect {samples}: {measured.wall_s:.1f}s", flush=True)
        print()
        print(
            common.table(
                [
                    "system",
                    "N",
                    "wall s",
                    "samples/s",
                    "sum peak RSS MB",
                    "peak PSS MB",
                    "largest proc MB",
                    "procs",
                ],
                rows,
            )
        )
        print()

        ratio_rows = []
        for samples in sizes:
            inspect = results[("inspect", samples, 0)]
            for concurrency in concurrencies:
                mine = results[("rlenv", samples, concurrency)]
                ratio_rows.append(
                    [
                        f"{samples}",
                        f"{concurrency}",
                        f"{inspect.wall_s / mine.wall_s:.2f}x",
                        f"{inspect.sum_peak_mb / mine.sum_peak_mb:.2f}x",
                    ]
                )
        print("ratio inspect / rlenv (higher: rlenv better)")
        print(common.table(["N", "rlenv concurrency", "wall time", "sum peak RSS"], ratio_rows))
        print()

        print("targets")
        missed = False
        largest = max(sizes)
        for concurrency in concurrencies:
            ratio = (
                results[("inspect", largest, 0)].wall_s
                / results[("rlenv", largest, concurrency)].wall_s
            )
            ok = ratio >= SPEEDUP_TARGET
            missed |= not ok and largest == 10000
            label = "10k" if largest == 10000 else f"{largest} (--quick; the target is at 10k)"
            print(
                f"  rlenv {label} --concurrency {concurrency} >= {SPEEDUP_TARGET:.0f}x faster"
                f" than inspect: {ratio:.2f}x  {common.verdict(ok)}"
            )
        for (system, samples, concurrency), measured in sorted(results.items()):
            if not system.startswith("rlenv"):
                continue
            ok = measured.sum_peak_mb <= MEMORY_TARGET_MB
            missed |= not ok
            which = " (first run)" if system == "rlenv-cold" else ""
            print(
                f"  rlenv {samples} --concurrency {concurrency}{which} peak memory <="
                f" {MEMORY_TARGET_MB:.0f} MB: sum of peaks {measured.sum_peak_mb:.0f} MB"
                f" ({_per_process(measured)})  {common.verdict(ok)}"
            )
            if samples == largest:
                print(measured.breakdown())

        if missed and not args.quick:
            print()
            print("profile (a target was missed)")
            spec = specs[largest]
            limit = 2000
            for command in (
                common.profile_command("orchestrator", str(spec), str(limit), "25"),
                common.profile_command(
                    "worker", str(spec), "python:benchenv:one_tool", str(limit), "25"
                ),
            ):
                profiled = subprocess.run(
                    command, capture_output=True, text=True, env=common.bench_env(), cwd=spec.parent
                )
                print(profiled.stdout)
                if profiled.returncode:
                    print(profiled.stderr[-3000:])


def _row(system: str, samples: int, measured: common.Measurement) -> list[str]:
    return [
        system,
        str(samples),
        f"{measured.wall_s:.1f}",
        f"{samples / measured.wall_s:.0f}",
        f"{measured.sum_peak_mb:.0f}",
        f"{measured.peak_pss_mb:.0f}",
        f"{measured.largest_mb:.0f}",
        str(measured.processes),
    ]


def _per_process(measured: common.Measurement) -> str:
    return " + ".join(
        f"{kib / 1024:.0f}" for kib in sorted(measured.peak_kib.values(), reverse=True)
    )


if __name__ == "__main__":
    main()
