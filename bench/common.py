"""Shared helpers for the benchmarks: process-tree measurement, synthetic envs, a chat server.

A benchmark prints figures and a PASS/MISS line per target and always exits 0: it reports, it
does not fail. Every measured run is a real subprocess (the whole process: interpreter start,
imports, work, teardown), timed with `time.perf_counter` around `Popen` ... `wait4`.

Memory of a process tree is measured by sampling /proc every `interval` seconds:

- sum of peaks: for every process seen in the tree (the command and all its descendants, e.g.
  rlenv's orchestrator and its frozen-world workers), its own peak RSS (`VmHWM` in
  /proc/PID/status, a high-water mark the kernel keeps, so it is exact up to the last sample),
  summed over processes. Shared pages (libpython, .so files) count once per process, so this
  is an upper bound on the tree's memory;
- peak PSS: the largest sampled sum of `Pss` (/proc/PID/smaps_rollup) over the live tree, which
  splits shared pages between the processes that map them (closer to what the tree costs);
- wait4 maxrss: `ru_maxrss` the kernel reports for the direct child when it is reaped: the
  largest single process of the tree (the child or a descendant it waited for), a cross-check.

A process that starts and exits between two samples is missed (none of the measured programs
does that: rlenv's workers and Inspect's process live for the whole run).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RLENV = BIN / "rlenv"
INSPECT_VENV = Path(os.environ.get("INSPECT_VENV", "/tmp/venv-inspect"))
FAKE_URL = "http://lookup.bench.invalid/v1/lookup"

# Measured runs use a bytecode cache, as an installed package does. This sandbox exports
# PYTHONDONTWRITEBYTECODE=1, which would make every run compile rlenv from source; the cache goes
# to a prefix directory so the work tree gets no __pycache__ folders. The first run warms it.
PYCACHE = Path(tempfile.gettempdir()) / "rlenv-bench-pycache"
# rlenv caches cassette indexes (and grades) by file hash; each benchmark invocation starts with
# an empty cache of its own, so a figure never depends on what an earlier run left behind.
RLENV_CACHE = Path(os.environ.get("BENCH_RLENV_CACHE") or tempfile.mkdtemp(prefix="bench-cache-"))
BENCH_ENV: dict[str, str | None] = {
    "PYTHONDONTWRITEBYTECODE": None,
    "PYTHONPYCACHEPREFIX": str(PYCACHE),
    "RLENV_CACHE_DIR": str(RLENV_CACHE),
    "BENCH_RLENV_CACHE": str(RLENV_CACHE),  # shared with helper processes of the same run
}
if "BENCH_RLENV_CACHE" not in os.environ:
    import atexit

    atexit.register(shutil.rmtree, RLENV_CACHE, True)


def bench_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with BENCH_ENV and `extra` applied (None removes a variable)."""
    merged: dict[str, str | None] = {**os.environ, **BENCH_ENV, **(extra or {})}
    return {key: value for key, value in merged.items() if value is not None}


# -- process tree measurement --------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Direct children of a process, over all its threads (/proc/PID/task/TID/children)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(part) for part in handle.read().split())
        except OSError:
            continue
    return found


def _tree(root: int) -> list[int]:
    pids, stack = [], [root]
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack.extend(_children(pid))
    return pids


def _status_kib(pid: int) -> tuple[int, int] | None:
    """(VmHWM, VmRSS) in KiB, or None for a zombie or vanished process."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            text = handle.read()
    except OSError:
        return None
    hwm = rss = None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return (hwm, rss) if hwm is not None and rss is not None else None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            parts = handle.read().split(b"\0")
    except OSError:
        return "?"
    words = [part.decode("utf-8", "replace") for part in parts if part]
    if not words:
        return "?"
    return " ".join([Path(words[0]).name, *words[1:]]).replace("\n", " ")[:90]


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class Measurement:
    """One whole-process run of a command."""

    command: list[str]
    returncode: int
    wall_s: float
    peak_kib: dict[int, int] = field(default_factory=dict)  # pid -> VmHWM
    names: dict[int, str] = field(default_factory=dict)  # pid -> command line (shortened)
    peak_pss_kib: int = 0
    peak_rss_sum_kib: int = 0  # the largest sum of the tree's RSS at one sample (live processes)
    wait4_maxrss_kib: int = 0
    cpu_s: float = 0.0  # user + system CPU of the command and the descendants it waited for
    stdout: str = ""
    stderr: str = ""

    @property
    def sum_peak_mb(self) -> float:
        return sum(self.peak_kib.values()) / 1024

    @property
    def peak_pss_mb(self) -> float:
        return self.peak_pss_kib / 1024

    @property
    def largest_mb(self) -> float:
        return max(self.wait4_maxrss_kib, *self.peak_kib.values(), 0) / 1024

    def breakdown(self) -> str:
        """Each process's peak RSS with what it runs, largest first."""
        return "\n".join(
            f"    {kib / 1024:7.1f} MB  {self.names.get(pid, '?')}"
            for pid, kib in sorted(self.peak_kib.items(), key=lambda item: -item[1])
        )

    @property
    def processes(self) -> int:
        return len(self.peak_kib)

    def check(self) -> Measurement:
        """Raise with the command's stderr when it failed (a broken benchmark is not a figure)."""
        if self.returncode != 0:
            raise RuntimeError(
                f"command failed ({self.returncode}): {' '.join(self.command)}\n"
                f"{self.stderr[-3000:]}\n{self.stdout[-2000:]}"
            )
        return self


def measure(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str | None] | None = None,
    interval: float = 0.02,
    pss: bool = True,
    timeout: float = 600.0,
) -> Measurement:
    """Run a command to completion; wall time and memory of its whole process tree."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    merged = bench_env(env)
    peaks: dict[int, int] = {}
    names: dict[int, str] = {}
    peak_pss = 0
    peak_rss_sum = 0
    done = threading.Event()

    started = time.perf_counter()
    process = subprocess.Popen(
        list(command), cwd=cwd, env=merged, stdout=out, stderr=err, stdin=subprocess.DEVNULL
    )

    def sample() -> None:
        nonlocal peak_pss, peak_rss_sum
        while not done.is_set():
            pss_total = rss_total = 0
            for pid in _tree(process.pid):
                status = _status_kib(pid)
                if status is None or status[0] == 0:  # zombie, or not yet exec'd
                    continue
                peaks[pid] = max(peaks.get(pid, 0), status[0])
                rss_total += status[1]
                if pid not in names:
                    names[pid] = _cmdline(pid)
                if pss:
                    pss_total += _pss_kib(pid)
            peak_pss = max(peak_pss, pss_total)
            peak_rss_sum = max(peak_rss_sum, rss_total)
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    killer = threading.Timer(timeout, lambda: os.kill(process.pid, signal.SIGKILL))
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        killer.cancel()
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    out.seek(0)
    err.seek(0)
    return Measurement(
        command=list(command),
        returncode=process.returncode,
        wall_s=wall,
        peak_kib=peaks,
        names=names,
        peak_pss_kib=peak_pss,
        peak_rss_sum_kib=peak_rss_sum,
        wait4_maxrss_kib=usage.ru_maxrss,
        cpu_s=usage.ru_utime + usage.ru_stime,
        stdout=out.read().decode("utf-8", "replace"),
        stderr=err.read().decode("utf-8", "replace"),
    )


def median_wall(command: Sequence[str], runs: int, **options: Any) -> tuple[float, list[float]]:
    """Median whole-process wall time of `runs` runs (memory sampling off)."""
    walls = [
        measure(command, pss=False, interval=1.0, **options).check().wall_s for _ in range(runs)
    ]
    return statistics.median(walls), walls


# -- synthetic envs ------------------------------------------------------------------------

ENV_MODULE = '''\
"""Benchmark env helpers: an instant policy, a one-tool policy and an httpx tool."""

import json

import httpx

URL = "{url}"
# module level, so SSL context creation happens once at import, not per tool call
_CLIENT = httpx.Client(timeout=10.0)


def instant(messages, tools, ctx):
    """Answer at once with the last word of the prompt."""
    return str(messages[-1]["content"]).split()[-1]


def one_tool(messages, tools, ctx):
    """Call `lookup` once with the prompt's last word, then answer with what it returned.

    The argument is "term": a field named "key" would be scrubbed as a secret before matching.
    """
    last = messages[-1]
    if last.get("role") == "tool":
        return json.loads(last["content"])["answer"]
    term = str(last["content"]).split()[-1]
    return {{
        "role": "assistant",
        "content": None,
        "tool_calls": [{{
            "id": "call_0",
            "type": "function",
            "function": {{"name": "lookup", "arguments": json.dumps({{"term": term}})}},
        }}],
    }}


def lookup(args, ctx):
    """POST the term to a fixed URL (replayed from the cassette at run time)."""
    response = _CLIENT.post(URL, json={{"term": args["term"]}})
    response.raise_for_status()
    return response.json()
'''


def input_key(index: int) -> str:
    return f"k{index:07d}"


def answer_for(index: int) -> str:
    return f"v{index:07d}"


def sha256_file(path: Path) -> str:
    from rlenv.canonical import sha256_file as project_sha256

    return project_sha256(path)


def interaction(index: int, url: str = FAKE_URL) -> dict[str, Any]:
    """One vcrpy interaction as `rlenv record` writes it: POST {"term": ...} -> {"answer": ...}."""
    body = json.dumps({"term": input_key(index)}, separators=(",", ":"))
    payload = json.dumps({"answer": answer_for(index)}, separators=(",", ":"))
    host = url.split("/")[2]
    return {
        "request": {
            "body": body,
            "headers": {
                "accept": ["*/*"],
                "content-length": [str(len(body))],
                "content-type": ["application/json"],
                "host": [host],
            },
            "method": "POST",
            "uri": url,
        },
        "response": {
            "body": {"string": payload},
            "headers": {
                "content-length": [str(len(payload))],
                "content-type": ["application/json"],
            },
            "status": {"code": 200, "message": "OK"},
        },
    }


def write_cassette(path: Path, count: int, url: str = FAKE_URL) -> Path:
    """A vcrpy YAML cassette (format version 1) with `count` distinct interactions."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    document = {"interactions": [interaction(index, url) for index in range(count)], "version": 1}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        yaml.dump(document, handle, Dumper=dumper, sort_keys=True, width=100)
    return path


def write_inputs(path: Path, count: int) -> Path:
    with open(path, "w") as handle:
        for index in range(count):
            handle.write(
                json.dumps(
                    {
                        "id": f"i{index:07d}",
                        "prompt": f"echo {input_key(index)}",
                        "answer": answer_for(index),
                    }
                )
                + "\n"
            )
    return path


def build_env(
    root: Path,
    inputs: int,
    *,
    policy: str = "instant",
    tool: bool = False,
    cassette_interactions: int | None = None,
    rollouts: int = 1,
    module: str = "benchenv",
) -> Path:
    """Write a bundled-style env (spec, inputs, helper module, cassette) and return the spec.

    `policy="instant"` answers with the input's key (exact_match fails: the gold is the value);
    `policy="one_tool"` looks the key up through the replayed tool and answers the value (passes).
    """
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(ENV_MODULE.format(url=FAKE_URL))
    inputs_path = write_inputs(root / "inputs.jsonl", inputs)
    spec: dict[str, Any] = {
        "name": f"bench-{policy}",
        "seed": 1,
        "time": "2025-01-01T00:00:00+00:00",
        "model": f"python:{module}:{policy}",
        "decoding": {"temperature": 0.0},
        "inputs": {"path": "inputs.jsonl", "sha256": sha256_file(inputs_path)},
        "verifiers": [{"name": "exact", "type": "exact_match", "expected_field": "answer"}],
        "rollouts": rollouts,
        "limits": {"max_turns": 4, "timeout_s": 30},
    }
    if tool:
        cassette = write_cassette(
            root / "cassettes" / "lookup.yaml", cassette_interactions or inputs
        )
        spec["tools"] = [
            {
                "name": "lookup",
                "description": "Look a key up.",
                "parameters": {
                    "type": "object",
                    "properties": {"term": {"type": "string"}},
                    "required": ["term"],
                    "additionalProperties": False,
                },
                "function": f"{module}:lookup",
                "cassette": {"path": "cassettes/lookup.yaml", "sha256": sha256_file(cassette)},
            }
        ]
    spec_path = root / "env.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec_path


@contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def rlenv_run(spec: Path, out: Path, *extra: str) -> list[str]:
    """The `rlenv run` command line (the real console script of this interpreter's venv)."""
    return [str(RLENV), "run", str(spec), "--out", str(out), "--json", *extra]


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


# -- a loopback OpenAI-compatible server in its own process --------------------------------


@dataclass
class ServerHandle:
    base_url: str
    times_path: Path
    pid: int

    def cpu_s(self) -> float:
        """User + system CPU seconds the server process has used so far (all its threads)."""
        with open(f"/proc/{self.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def chat_server(latency_ms: float, kind: str = "threaded") -> Iterator[ServerHandle]:
    """A chat server in a child process; its request arrival times land in a file.

    `kind` "threaded": tests/chat_server.py (a thread per connection); "lean": the same replies
    from one event loop (bench/lean_chat_server.py), for runs where the server's own CPU on
    this machine's cores would be counted against rlenv. The server runs in its own interpreter
    so it does not share a GIL with the harness.
    """
    if kind not in SERVER_KINDS:
        raise ValueError(f"server kind {kind!r}: one of {', '.join(SERVER_KINDS)}")
    directory = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    times = directory / "times.json"
    process = subprocess.Popen(
        [sys.executable, __file__, f"_serve_{kind}", str(latency_ms), str(times)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"chat server did not start: {line!r}")
        yield ServerHandle(line.removeprefix("listening on "), times, process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def arrival_times(handle: ServerHandle) -> list[float]:
    """Ask the server process to dump the monotonic arrival time of every request so far."""
    request = handle.times_path.with_suffix(".request")
    handle.times_path.unlink(missing_ok=True)
    request.write_text("dump")
    for _ in range(3000):
        if handle.times_path.exists():
            try:
                return list(json.loads(handle.times_path.read_text()))
            except ValueError:
                pass
        time.sleep(0.01)  # polling a file written by another process, not synchronising tests
    raise RuntimeError("chat server did not dump its request times")


SERVER_KINDS = ("threaded", "lean")


def _serve_lean(latency_ms: float, times_path: Path) -> None:
    import asyncio

    import lean_chat_server

    loop = lean_chat_server.new_loop()
    asyncio.set_event_loop(loop)
    ready = lambda url: print(f"listening on {url}", flush=True)  # noqa: E731
    server, state = loop.run_until_complete(lean_chat_server.serve(latency_ms / 1000, ready))
    request = times_path.with_suffix(".request")
    parent = os.getppid()

    def poll() -> None:
        if os.getppid() != parent:  # never outlive the benchmark
            loop.stop()
            return
        _dump_if_asked(request, times_path, lambda: state.arrivals)
        loop.call_later(0.05, poll)

    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.call_soon(poll)
    loop.run_forever()
    server.close()


def _serve_threaded(latency_ms: float, times_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from chat_server import start_chat_server

    server, base_url, _ = start_chat_server(latency_s=latency_ms / 1000)
    request = times_path.with_suffix(".request")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent = os.getppid()
    print(f"listening on {base_url}", flush=True)
    while not stop.wait(0.05) and os.getppid() == parent:  # never outlive the benchmark
        _dump_if_asked(request, times_path, lambda: _stamps(server))
    server.stop()


def _stamps(server: Any) -> list[float]:
    with server.lock:
        return [entry["time"] for entry in server.log]


def _dump_if_asked(request: Path, times_path: Path, stamps: Callable[[], list[float]]) -> None:
    """`arrival_times`'s answer: the arrival times written whole to `times_path`, if asked."""
    if request.exists():
        request.unlink()
        partial = times_path.with_suffix(".tmp")
        partial.write_text(json.dumps(stamps()))
        os.replace(partial, times_path)


# -- output ----------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width text table (the output is committed as evidence, so no colours)."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(str(h)), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = [
        "  ".join(
            value.rjust(w) if _numeric(value) else value.ljust(w)
            for value, w in zip(row, widths, strict=True)
        )
        for row in cells
    ]
    return "\n".join([line, rule, *body])


def _numeric(text: str) -> bool:
    try:
        float(text.rstrip("x%s").replace(",", ""))
    except ValueError:
        return False
    return True


def _revision() -> str:
    """The repository's commit, and whether rlenv/ has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "rlenv"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {commit}" + (" + uncommitted changes in rlenv/" if dirty else "")


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def header(title: str) -> None:
    import platform

    print(f"# {title}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  python {platform.python_version()}"
        f"  {os.cpu_count()} cpus  {platform.platform()}"
    )
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    started = _revision()
    print(f"# rlenv at {started}")
    print(f"# load average at start: {_load()} (other work on the machine skews every figure)")
    print()

    def check_revision() -> None:
        ended = _revision()
        print(f"\n# load average at end: {_load()}")
        if ended != started:
            print(f"# NOTE: rlenv changed during the run: now at {ended}")

    import atexit

    atexit.register(check_revision)


# -- profiles (printed when a target is missed) ------------------------------------------------


def format_profile(profile: Any, top: int, title: str) -> str:
    """Top entries of a cProfile run by own time and by cumulative time, paths shortened."""
    import pstats

    stats = pstats.Stats(profile)
    entries = []
    for (filename, line, function), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename
        for marker in ("site-packages/", "lib/python3.11/", str(ROOT) + "/"):
            if marker in where:
                where = where.split(marker, 1)[1]
                break
        label = f"{where}:{line}({function})" if line else function
        entries.append((own, cumulative, calls, label))
    lines = [f"{title}: top {top} by own time"]
    lines.append(f"  {'own s':>8} {'cum s':>8} {'calls':>9}  function")
    for own, cumulative, calls, label in sorted(entries, reverse=True)[:top]:
        lines.append(f"  {own:8.3f} {cumulative:8.3f} {calls:9d}  {label}")
    lines.append(f"{title}: top {top} by cumulative time")
    lines.append(f"  {'own s':>8} {'cum s':>8} {'calls':>9}  function")
    for own, cumulative, calls, label in sorted(entries, key=lambda e: -e[1])[:top]:
        lines.append(f"  {own:8.3f} {cumulative:8.3f} {calls:9d}  {label}")
    return "\n".join(lines)


def profile_command(kind: str, *args: str) -> list[str]:
    """A command line that profiles part of rlenv in a fresh interpreter (see `_profile_*`)."""
    return [sys.executable, __file__, f"_profile_{kind}", *args]


def _profile_orchestrator(spec: str, limit: int, top: int) -> None:
    """cProfile of `rlenv.runner.run(..., concurrency=1)` in this process (workers not profiled)."""
    import cProfile

    from rlenv.runner import RunSettings, run

    out = Path(tempfile.mkdtemp(prefix="bench-prof-")) / "run"
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    run(spec, RunSettings(out=out, limit=limit, concurrency=1))
    profile.disable()
    elapsed = time.perf_counter() - started
    shutil.rmtree(out.parent, ignore_errors=True)
    print(
        f"orchestrator: rlenv.runner.run(limit={limit}, concurrency=1) took {elapsed:.1f}s"
        " under cProfile (time waiting for the worker shows as epoll/lock waits)"
    )
    print(format_profile(profile, top, "orchestrator"))


def _profile_worker(spec: str, model: str, count: int, top: int) -> None:
    """cProfile of a frozen-world worker in this process: its start, then `count` rollouts."""
    import cProfile
    import resource

    clock = time.perf_counter  # kept before freezegun replaces time.perf_counter
    from rlenv.worker.config import RolloutTask, WorkerConfig
    from rlenv.worker.runtime import WorldRuntime

    work = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    config = WorkerConfig(spec_path=spec, work_root=str(work), model_uri=model)
    profile = cProfile.Profile()
    started = clock()
    profile.enable()
    runtime = WorldRuntime(config)
    profile.disable()
    init = clock() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"worker start (WorldRuntime.__init__): {init:.2f}s, peak RSS after start {rss:.0f} MB")
    print(format_profile(profile, top, "worker start"))
    profile = cProfile.Profile()
    total = len(runtime.inputs)
    started = clock()
    profile.enable()
    for number in range(count):
        runtime.run_rollout(RolloutTask(number % total, number // total))
    profile.disable()
    elapsed = clock() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"worker: {count} rollouts in {elapsed:.2f}s under cProfile"
        f" ({elapsed / count * 1000:.2f} ms each), peak RSS {rss:.0f} MB"
    )
    print(format_profile(profile, top, "worker rollouts"))
    shutil.rmtree(work, ignore_errors=True)


def _worker_cost(spec: str, model: str, count: int) -> None:
    """CPU per rollout of a frozen-world worker in this process, no profiler, through the
    call a worker answers (`protocol.handle("run_rollout", ...)`: output capture and the
    leftover-process check included), after 200 warm-up rollouts; RSS after start."""
    cpu = time.process_time  # every thread of this process (the output drains too)

    def rss_mb() -> float:
        status = _status_kib(os.getpid())
        return status[1] / 1024 if status else 0.0

    from rlenv.worker import protocol
    from rlenv.worker.config import RolloutTask, WorkerConfig

    work = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    protocol.init_worker(WorkerConfig(spec_path=spec, work_root=str(work), model_uri=model))
    started_mb = rss_mb()
    runtime = protocol._get()
    total = len(runtime.inputs)
    for number in range(200):
        protocol.handle("run_rollout", RolloutTask(number % total, 10_000 + number // total))
    started = cpu()
    for number in range(count):
        protocol.handle("run_rollout", RolloutTask(number % total, number // total))
    spent = cpu() - started
    print(
        f"worker: {spent / count * 1e6:.0f} us CPU per rollout over {count};"
        f" RSS after start {started_mb:.0f} MB, after the rollouts {rss_mb():.0f} MB;"
        f" load {_load()}",
        file=sys.stderr,  # the worker's fd 1 is its fd 2
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1].startswith("_"):
    _command, _args = sys.argv[1], sys.argv[2:]
    if _command == "_serve_threaded":
        _serve_threaded(float(_args[0]), Path(_args[1]))
    elif _command == "_serve_lean":
        _serve_lean(float(_args[0]), Path(_args[1]))
    elif _command == "_profile_orchestrator":
        _profile_orchestrator(_args[0], int(_args[1]), int(_args[2]))
    elif _command == "_profile_worker":
        _profile_worker(_args[0], _args[1], int(_args[2]), int(_args[3]))
    elif _command == "_worker_cost":
        _worker_cost(_args[0], _args[1], int(_args[2]))
