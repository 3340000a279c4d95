"""Per-rollout overhead of `rlenv run`: 10k plain and 10k one-tool-call rollouts, whole process;
`verify` (2 runs) against one run; Inspect AI for the same number of samples when its venv exists.

rlenv: bundled-style envs built in a temp dir: N inputs and one exact_match verifier, with
- plain: an instant python policy that answers at once (no tools);
- one-tool: an instant python policy that makes one tool call (the tool POSTs with a
  module-level `httpx.Client`; the HTTP is replayed from a vcrpy YAML cassette of N distinct
  interactions) and then answers.
`rlenv run SPEC --concurrency C`, whole process (interpreter start, imports, worker start, the
rollouts, the summary, exit). Wall time, CPU time (user + sys of the whole tree) and memory
(sum of each process's peak RSS, `common.measure`) are printed; the machine is shared, so CPU
time says more than wall time when the load average is high.

The first rlenv run of the one-tool env builds the cassette's index (cached by the file's hash
in RLENV_CACHE_DIR, a temp dir of this benchmark's own); it is reported as "first run", and the
later runs, which load the index from the cache, are the ones the targets are about.

`verify`: `rlenv verify SPEC --runs 2` of the plain env against one `rlenv run` of it.

Inspect: a Task with a MemoryDataset of N samples, solver generate(), scorer includes(), model
mockllm/model, `inspect_ai.eval(...)` with default log writing and max_connections = max_samples
= N, whole process, in the separate venv /tmp/venv-inspect (`INSPECT_VENV` to change); skipped
with `--no-inspect` or when that venv does not exist.

Plain rollouts are measured two ways. With a python policy (`python:benchenv:instant`) the
policy is env code, which runs in a process of its own per rollout (issue 26: nothing one
rollout does reaches the next). With a replayed policy (`replay:answers.jsonl`, the answers as
data) a rollout runs no env code and no such process: the same work as Inspect's sample with
mockllm, whose model runs inside Inspect's process and runs no user code.

Targets (issue 30, at 10k, side by side with Inspect in the same run): plain >= 90x Inspect
(wall; the replayed policy: like for like), one replayed tool call >= 60x, sum of peak RSS <=
150 MB; verify (2 runs) <= 2.1x one run. The python policy's plain ratio is reported beside it.
On a miss, a cProfile of the orchestrator (`--concurrency 1`) and of an in-process frozen-world
worker is printed (`--no-profile` to skip). Run: `.venv/bin/python bench/overhead.py [--quick]
[--no-inspect]` (`--quick`: 1k only, no profile).
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

PLAIN_SPEEDUP = 90.0
TOOL_SPEEDUP = 60.0
MEMORY_TARGET_MB = 150.0
VERIFY_TARGET = 2.1
CONCURRENCIES = (2, 4)
DEFAULT_CONCURRENCY = 4

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


def write_answers(path: Path, samples: int) -> Path:
    """A replay file with each input's gold answer (every rollout passes)."""
    with open(path, "w") as handle:
        for index in range(samples):
            line = {"input_id": f"i{index:07d}", "rollout": 0, "answer": common.answer_for(index)}
            handle.write(json.dumps(line) + "\n")
    return path


def run_rlenv(
    spec: Path,
    root: Path,
    concurrency: int,
    expected: int,
    *,
    tool: bool = True,
    model: str | None = None,
) -> common.Measurement:
    out = root / f"out-c{concurrency}-{time.monotonic_ns()}"
    extra = ["--concurrency", str(concurrency)] + (["--model", model] if model else [])
    measured = common.measure(common.rlenv_run(spec, out, *extra), timeout=1800)
    measured.check()
    summary = json.loads(measured.stdout)
    hits = summary.get("fixtures", {}).get("hit", 0)
    passed = summary["pass_rate"]["value"]
    if tool and (summary["rollouts"] != expected or hits != expected or passed != 1.0):
        raise RuntimeError(
            f"unexpected run: {summary['counts']} fixtures {summary['fixtures']} pass rate {passed}"
        )
    if not tool and (summary["rollouts"] != expected or summary["counts"].get("ok") != expected):
        raise RuntimeError(f"unexpected run: {summary['counts']}")
    return measured


def run_verify(spec: Path) -> common.Measurement:
    """`rlenv verify SPEC --runs 2 --json`, whole process; the digests must agree."""
    measured = common.measure(
        [str(common.RLENV), "verify", str(spec), "--runs", "2", "--json"], timeout=1800
    ).check()
    if json.loads(measured.stdout).get("identical") is not True:
        raise RuntimeError(f"verify did not find identical runs: {measured.stdout[-500:]}")
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
    parser.add_argument("--quick", action="store_true", help="1k only, no profile")
    parser.add_argument("--no-inspect", action="store_true", help="skip the Inspect AI runs")
    parser.add_argument("--no-profile", action="store_true", help="no profile on a miss")
    args = parser.parse_args()
    sizes = [1000] if args.quick else [1000, 10000]
    with_inspect = not args.no_inspect and inspect_python().exists()
    common.header("overhead: rlenv run per rollout (plain, one tool call), verify, Inspect")
    if with_inspect:
        print(f"inspect_ai {inspect_version()} in {common.INSPECT_VENV}")
    else:
        why = "--no-inspect" if args.no_inspect else f"no venv at {common.INSPECT_VENV}"
        print(f"Inspect AI runs skipped ({why})")
    print("memory: sum of each process's peak RSS (VmHWM from /proc, sampled every 20 ms over")
    print("the whole process tree); PSS: peak of the sampled sum of Pss over the live tree;")
    print("the memory target is on PSS: a worker's per-rollout child shares the worker's pages")
    print("(copy on write), which every child's RSS counts again: the sum of RSS counts them")
    print("once per child sampled, PSS once in all")
    print("cpu s: user + sys of the whole tree (the machine is shared: see the load average)")
    print()

    rows = []
    results: dict[tuple[str, int, int], common.Measurement] = {}
    specs: dict[tuple[str, int], Path] = {}
    with common.temp_dir("bench-overhead-") as root:
        warm = common.build_env(root / "warm", 10, policy="one_tool", tool=True)
        run_rlenv(warm, root, 2, 10)  # fills the bytecode cache; not reported
        script = root / "inspect_task.py"
        script.write_text(INSPECT_SCRIPT)
        if with_inspect and not args.quick:
            run_inspect(script, root, 10)  # fills Inspect's bytecode cache too; not reported
        for samples in sizes:
            plain = common.build_env(root / f"plain-{samples}", samples)
            specs[("plain", samples)] = plain
            measured = run_rlenv(plain, root, DEFAULT_CONCURRENCY, samples, tool=False)
            results[("plain", samples, DEFAULT_CONCURRENCY)] = measured
            label = f"rlenv plain, python policy --concurrency {DEFAULT_CONCURRENCY}"
            rows.append(_row(label, samples, measured))
            print(f"  ... rlenv plain {samples}: {measured.wall_s:.1f}s", flush=True)

            answers = write_answers(root / f"answers-{samples}.jsonl", samples)
            measured = run_rlenv(
                plain, root, DEFAULT_CONCURRENCY, samples, tool=False, model=f"replay:{answers}"
            )
            results[("replayed", samples, DEFAULT_CONCURRENCY)] = measured
            label = f"rlenv plain, replayed policy --concurrency {DEFAULT_CONCURRENCY}"
            rows.append(_row(label, samples, measured))
            print(f"  ... rlenv plain replayed {samples}: {measured.wall_s:.1f}s", flush=True)

            spec = common.build_env(root / f"tool-{samples}", samples, policy="one_tool", tool=True)
            specs[("tool", samples)] = spec
            measured = run_rlenv(spec, root, CONCURRENCIES[0], samples)
            results[("tool-cold", samples, CONCURRENCIES[0])] = measured
            first = f"rlenv one-tool --concurrency {CONCURRENCIES[0]}, first run"
            rows.append(_row(first, samples, measured))
            print(f"  ... rlenv one-tool {samples} first run: {measured.wall_s:.1f}s", flush=True)
            for concurrency in CONCURRENCIES:
                measured = run_rlenv(spec, root, concurrency, samples)
                results[("tool", samples, concurrency)] = measured
                rows.append(_row(f"rlenv one-tool --concurrency {concurrency}", samples, measured))
                print(f"  ... rlenv one-tool {samples} c={concurrency}: {measured.wall_s:.1f}s")
            if with_inspect:
                measured = run_inspect(script, root, samples)
                results[("inspect", samples, 0)] = measured
                rows.append(_row(f"inspect max_samples={samples}", samples, measured))
                print(f"  ... inspect {samples}: {measured.wall_s:.1f}s", flush=True)
        largest = max(sizes)
        verified = run_verify(specs[("plain", largest)])
        rows.append(_row("rlenv verify --runs 2, plain", largest, verified))
        print(f"  ... rlenv verify {largest}: {verified.wall_s:.1f}s", flush=True)
        print()
        print(
            common.table(
                [
                    "system",
                    "N",
                    "wall s",
                    "cpu s",
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

        if with_inspect:
            ratio_rows = []
            for samples in sizes:
                inspect = results[("inspect", samples, 0)]
                for concurrency in CONCURRENCIES:
                    mine = results[("tool", samples, concurrency)]
                    ratio_rows.append(
                        [
                            f"{samples}",
                            f"{concurrency}",
                            f"{inspect.wall_s / mine.wall_s:.2f}x",
                            f"{inspect.sum_peak_mb / mine.sum_peak_mb:.2f}x",
                        ]
                    )
            print("ratio inspect / rlenv one-tool (higher: rlenv better)")
            print(common.table(["N", "rlenv concurrency", "wall time", "sum peak RSS"], ratio_rows))
            print()

        label = "10k" if largest == 10000 else f"{largest} (--quick; the targets are at 10k)"
        print(f"targets (at {label}, --concurrency {DEFAULT_CONCURRENCY} unless named)")
        missed = False

        def target(text: str, ok: bool) -> None:
            nonlocal missed
            missed |= not ok
            print(f"  {text}  {common.verdict(ok)}")

        plain_run = results[("plain", largest, DEFAULT_CONCURRENCY)]
        replayed_run = results[("replayed", largest, DEFAULT_CONCURRENCY)]
        tool_run = results[("tool", largest, DEFAULT_CONCURRENCY)]
        if with_inspect:
            inspect_run = results[("inspect", largest, 0)]
            for name, measured, goal in (
                ("plain (replayed policy, like for like)", replayed_run, PLAIN_SPEEDUP),
                ("plain (python policy, a process per rollout)", plain_run, PLAIN_SPEEDUP),
                ("one replayed tool call", tool_run, TOOL_SPEEDUP),
            ):
                speedup = inspect_run.wall_s / measured.wall_s
                target(
                    f"{name} >= {goal:.0f}x Inspect: {inspect_run.wall_s:.1f} /"
                    f" {measured.wall_s:.2f} s = {speedup:.1f}x (cpu"
                    f" {inspect_run.cpu_s / measured.cpu_s:.1f}x)",
                    speedup >= goal,
                )
        for name, measured in (
            ("plain, replayed", replayed_run),
            ("plain, python policy", plain_run),
            ("one-tool", tool_run),
        ):
            target(
                f"{name} peak PSS <= {MEMORY_TARGET_MB:.0f} MB: {measured.peak_pss_mb:.0f} MB"
                f" (sum of each process's peak RSS: {measured.sum_peak_mb:.0f} MB ="
                f" {_per_process(measured)})",
                measured.peak_pss_mb <= MEMORY_TARGET_MB,
            )
        ratio = verified.wall_s / plain_run.wall_s
        target(
            f"verify (2 runs) <= {VERIFY_TARGET}x one run: {verified.wall_s:.1f} /"
            f" {plain_run.wall_s:.1f} s = {ratio:.2f}x (cpu {verified.cpu_s:.1f} /"
            f" {plain_run.cpu_s:.1f} s = {verified.cpu_s / plain_run.cpu_s:.2f}x)",
            ratio <= VERIFY_TARGET,
        )
        for name, measured in (("plain, replayed", replayed_run), ("one-tool", tool_run)):
            print(f"per process, {name} (the 12 largest):")
            print("\n".join(measured.breakdown().splitlines()[:12]))

        if missed and not args.quick and not args.no_profile:
            print()
            print("profile (a target was missed)")
            limit = 2000
            for kind, policy in (("plain", "instant"), ("tool", "one_tool")):
                spec = specs[(kind, largest)]
                for command in (
                    common.profile_command("orchestrator", str(spec), str(limit), "25"),
                    common.profile_command(
                        "worker", str(spec), f"python:benchenv:{policy}", str(limit), "25"
                    ),
                ):
                    profiled = subprocess.run(
                        command,
                        capture_output=True,
                        text=True,
                        env=common.bench_env(),
                        cwd=spec.parent,
                    )
                    print(f"[{kind}]")
                    print(profiled.stdout)
                    if profiled.returncode:
                        print(profiled.stderr[-3000:])


def _row(system: str, samples: int, measured: common.Measurement) -> list[str]:
    return [
        system,
        str(samples),
        f"{measured.wall_s:.1f}",
        f"{measured.cpu_s:.1f}",
        f"{samples / measured.wall_s:.0f}",
        f"{measured.sum_peak_mb:.0f}",
        f"{measured.peak_pss_mb:.0f}",
        f"{measured.largest_mb:.0f}",
        str(measured.processes),
    ]


def _per_process(measured: common.Measurement, shown: int = 10) -> str:
    sizes = sorted(measured.peak_kib.values(), reverse=True)
    text = " + ".join(f"{kib / 1024:.0f}" for kib in sizes[:shown])
    if len(sizes) > shown:
        text += f" + {len(sizes) - shown} more"
    return text


if __name__ == "__main__":
    main()
