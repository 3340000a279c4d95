"""Every benchmark in one go (`make bench`): each script's output, then one table of every
figure with its target and PASS/MISS.

Each script of `SCRIPTS` runs in turn with this interpreter (the project's venv), its output
shown as it comes and kept in `OUT/NAME.txt` (default `bench/results/`, where the committed
outputs live; `--quick` passes `--quick` to every script that has it and writes to a temp dir
unless `--out` is given). A script that fails or times out is a row `ERROR`, and the rest still
run. At the end, every line a script printed with PASS or MISS on it becomes a row of one table
(bench, figure with its target, verdict), also kept in `OUT/summary.txt`.

Inspect AI, the peer `overhead.py` compares with, runs from its own venv: `INSPECT_VENV`
(`make bench` creates `.venv-inspect` with the pinned version and sets it).

`--readme` runs nothing: it rewrites README.md's performance table (between the
`<!-- bench:begin -->` and `<!-- bench:end -->` lines) from the outputs in `OUT`, so the table
is always what `make bench` printed, never typed by hand.

    .venv/bin/python bench/all.py [--quick] [--only startup,replay] [--out DIR]
    .venv/bin/python bench/all.py --readme [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

# (script, takes --quick); cheap ones first, so a short session still sees most figures
SCRIPTS: list[tuple[str, bool]] = [
    ("startup", True),
    ("replay", True),
    ("overhead", True),
    ("memory", True),
    ("concurrency", True),
    ("serve", True),
    ("failing_endpoint", True),
    ("bad_inputs", False),
    ("isolation", False),
    ("attacks", True),
    ("detection", True),
    ("callback", False),
    ("review_scale", False),
    ("real_hacks", True),  # trains 18 tiny GRPO runs: ~20 min of CPU on 2 quiet cores
]
TIMEOUT_S = 3600.0  # per script; the longest (overhead.py with Inspect's 10k) takes ~15 min
VERDICT = re.compile(r"\b(PASS|MISS)\b")
TOTAL = re.compile(r"^total\s+(\d+)\s+(\d+)\s*$")  # the last row of a tried/held table


def run_script(name: str, quick: bool, out: Path) -> tuple[int | str, float]:
    """Run one bench script, echoing and saving its output; (exit code or why not, wall s)."""
    takes_quick = dict(SCRIPTS)[name]
    command = [sys.executable, str(BENCH / f"{name}.py")]
    if quick and takes_quick:
        command.append("--quick")
    print(f"\n=== {' '.join([Path(command[0]).name, *command[1:]])}", flush=True)
    start = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        command,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                print(line, end="", flush=True)
                lines.append(line)
                if time.monotonic() - start > TIMEOUT_S:
                    process.kill()
                    lines.append(f"ERROR: killed after {TIMEOUT_S:.0f} s\n")
                    break
        finally:
            code: int | str = process.wait()
    wall = time.monotonic() - start
    if any(line.startswith("ERROR: killed") for line in lines):
        code = "timeout"
    (out / f"{name}.txt").write_text("".join(lines), encoding="utf-8")
    return code, wall


def verdicts(name: str, out: Path) -> list[tuple[str, str, str]]:
    """(bench, figure with its target, PASS/MISS) for every verdict line of a saved output."""
    path = out / f"{name}.txt"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        found = VERDICT.findall(line)
        if not found or line.lstrip().startswith("#"):
            continue
        text = VERDICT.sub("", line).strip().removeprefix("target:").strip()
        rows.append((name, " ".join(text.split()), found[-1]))
    if not rows:  # tried/held tables (bad_inputs, attacks): the target is every attempt held
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            total = TOTAL.match(line)
            if total:
                tried, held = int(total[1]), int(total[2])
                figure = f"held {held} of {tried} tried (target: every one held)"
                rows.append((name, figure, "PASS" if held == tried else "MISS"))
                break  # the first table is the run's (a saved output may add older ones)
    return rows


def table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


HEADERS = ("bench", "figure (target)", "verdict")


def markdown(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| bench | figure (target) | verdict |", "| --- | --- | --- |"]
    lines += [f"| `{b}` | {f.replace('|', '/')} | {v} |" for b, f, v in rows]
    return "\n".join(lines)


def collect(names: list[str], out: Path, codes: dict[str, int | str]) -> list[tuple[str, str, str]]:
    rows = []
    for name in names:
        found = verdicts(name, out)
        code = codes.get(name, 0)
        if code not in (0, None):
            found.append((name, f"the script did not finish (exit {code})", "ERROR"))
        elif not found and (out / f"{name}.txt").is_file():
            found.append((name, f"figures only, no target: see {name}.txt", "-"))
        rows += found
    return rows


def update_readme(out: Path) -> None:
    names = [name for name, _ in SCRIPTS if (out / f"{name}.txt").is_file()]
    rows = collect(names, out, {})
    if not rows:
        raise SystemExit(f"bench/all.py: no bench outputs in {out}: run `make bench` first")
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"bench/all.py: README.md has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    stamp = _stamp(out)
    block = f"{BEGIN}\n{stamp}\n\n{markdown(rows)}\n{END}"
    README.write_text(head + block + tail, encoding="utf-8")
    print(f"README.md: performance table rewritten from {len(rows)} verdicts in {out}")


def _stamp(out: Path) -> str:
    """When the outputs were made (the date line every script's header prints)."""
    dates = []
    for name, _ in SCRIPTS:
        path = out / f"{name}.txt"
        if path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:4]:
                found = re.match(r"# (20\d\d-\d\d-\d\d[ T]\d\d:\d\d)", line)
                if found:
                    dates.append(found[1].replace("T", " "))
    span = f"{min(dates)} to {max(dates)}" if dates else "dates unknown"
    return (
        f"_Written by `bench/all.py --readme` from `bench/results/` (outputs made {span}, on"
        " the 2-core development machine; each output names its commit and load average)._"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="--quick to every script with it")
    parser.add_argument("--only", help="comma-separated script names (default: all)")
    parser.add_argument("--out", type=Path, help="where outputs go (default bench/results)")
    parser.add_argument("--readme", action="store_true", help="rewrite README's table, run nothing")
    args = parser.parse_args()
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="rlenv-bench-")) if args.quick else BENCH / "results"
    )
    if args.readme:
        update_readme(args.out or BENCH / "results")
        return
    known = [name for name, _ in SCRIPTS]
    names = args.only.split(",") if args.only else known
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"bench/all.py: unknown script(s) {unknown}; known: {known}")
    out.mkdir(parents=True, exist_ok=True)
    inspect = os.environ.get("INSPECT_VENV", "(unset: overhead.py's default)")
    print(f"# bench/all.py: {len(names)} scripts, outputs in {out}; INSPECT_VENV={inspect}")
    codes: dict[str, int | str] = {}
    walls: dict[str, float] = {}
    for name in names:
        codes[name], walls[name] = run_script(name, args.quick, out)
    rows = collect(names, out, codes)
    summary = table(rows)
    timing = ", ".join(f"{name} {walls[name]:.0f}s" for name in names)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    text = f"{summary}\n\nwall time per script: {timing}\nload average at end: {load}\n"
    (out / "summary.txt").write_text(text, encoding="utf-8")
    print("\n=== every figure with its target")
    print(text, end="")
    passed = sum(1 for row in rows if row[2] == "PASS")
    print(f"{passed} PASS of {len(rows)} (outputs and summary.txt in {out})")


if __name__ == "__main__":
    main()
