"""Tried/held: the isolation attack catalog of `tests/isolation_catalog.py`, as a table.

In-world attacks (a tool of a real `rlenv run` whose orchestrator holds OPENAI_API_KEY and
another secret, against real host listeners: AF_UNIX at a path and abstract, UDP, TCP) under
the local executor and, when Ray is installed, `--executor ray`; code-verifier sandbox attacks
(fork bomb, children and threads over the memory limit, files over the disk limit, /dev/shm,
host paths in /proc) under every namespace mechanism that works here; policy output
(print, os.write(1/2), subprocesses, an import-time print) against `rlenv run --json`; the
channels between rollouts of `tests/channels_catalog.py` (keyring, SysV and POSIX IPC, an
abstract socket, /dev/shm, /tmp) in workers and sandboxes.

An attack is held when it reports no success and no host listener saw it; a row marked "not
promised" is a limit the README states (unshare shows the host file system). Always exits 0.
Run: `.venv/bin/python bench/isolation.py [--no-ray]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.channels_catalog import (  # noqa: E402
    WORLD_NOT_PROMISED,
    Crossing,
    sandbox_crossings,
    world_crossings,
)
from tests.isolation_catalog import (  # noqa: E402
    NOISE_MARKERS,
    NOT_PROMISED,
    NOT_PROMISED_ON_RAY,
    RLENV,
    Outcome,
    orchestrator_environment,
    run_sandbox_attacks,
    run_world_attacks,
    write_noisy_env,
)


def _row(where: str, outcome: Outcome, promised: bool) -> tuple[str, str, str, str, str]:
    verdict = "held" if outcome.held else ("OPEN" if promised else "open (not promised)")
    return (where, outcome.attack.group, outcome.attack.name, verdict, outcome.detail[:70])


def _noise(tmp: Path) -> list[tuple[str, str, str, str, str]]:
    """Policy output against `rlenv run --json` and the record."""
    spec = write_noisy_env(tmp / "noisy-env")
    result = subprocess.run(
        [str(RLENV), "run", str(spec), "--out", str(tmp / "noisy-run"), "--json"],
        cwd=ROOT,
        env=orchestrator_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    rows = []
    try:
        json.loads(result.stdout)
        parsed = "stdout is one JSON document"
    except ValueError:
        parsed = ""
    leaked = [m for m in NOISE_MARKERS + ["IMPORT-TIME-PRINT"] if m in result.stdout]
    rows.append(
        (
            "local",
            "output",
            "run --json",
            "held" if parsed and not leaked else "OPEN",
            parsed or f"stdout polluted: {leaked[:3]}",
        )
    )
    records_path = tmp / "noisy-run" / "results.jsonl"
    records = (
        [json.loads(line) for line in records_path.read_text().splitlines()]
        if (records_path.exists())
        else []
    )
    kept = all(
        all(
            m in r.get("output", {}).get("stdout", "") + r.get("output", {}).get("stderr", "")
            for m in NOISE_MARKERS
        )
        for r in records
    ) and bool(records)
    rows.append(
        (
            "local",
            "output",
            "kept in record",
            "held" if kept else "OPEN",
            f"{len(NOISE_MARKERS)} markers in output of {len(records)} records, capped",
        )
    )
    return rows


def _channel(where: str, crossing: Crossing) -> tuple[str, str, str, str, str]:
    """A row for one channel between rollouts (`tests/channels_catalog.py`)."""
    promised = where != "local" or crossing.channel.split(" ")[0] not in WORLD_NOT_PROMISED
    verdict = "held" if crossing.held else ("OPEN" if promised else "open (not promised)")
    detail = f"wrote: {crossing.wrote[:60]} | read: {crossing.read[:60]}"
    return (where, "channel", crossing.channel, verdict, detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    options = parser.parse_args()
    from rlenv.sandbox import _mechanism_works

    rows: list[tuple[str, str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rlenv-bench-isolation-") as scratch:
        tmp = Path(scratch)
        for outcome in run_world_attacks(tmp / "local"):
            rows.append(_row("local", outcome, True))
        if not options.no_ray and importlib.util.find_spec("ray") is not None:
            for outcome in run_world_attacks(tmp / "ray", executor="ray"):
                promised = outcome.attack.name not in NOT_PROMISED_ON_RAY
                rows.append(_row("ray", outcome, promised))
        for mechanism in ("bwrap", "unshare"):
            if not _mechanism_works(mechanism):
                rows.append((mechanism, "sandbox", "-", "not run", "mechanism unavailable here"))
                continue
            for outcome in run_sandbox_attacks(tmp / mechanism, mechanism):
                promised = (outcome.attack.name, mechanism) not in NOT_PROMISED
                rows.append(_row(mechanism, outcome, promised))
        rows += _noise(tmp)
        rows += [_channel("local", c) for c in world_crossings(tmp / "channels", RLENV, ROOT)]
        for mechanism in ("bwrap", "unshare"):
            if _mechanism_works(mechanism):
                crossings = sandbox_crossings(tmp / f"channels-{mechanism}", mechanism)
                rows += [_channel(mechanism, c) for c in crossings]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    header = ("where", "group", "attack", "verdict", "detail")
    print("  ".join(h.ljust(w) for h, w in zip(header[:4], widths, strict=True)) + "  detail")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    print()
    for where in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == where and row[3] != "not run"]
        promised = [row for row in mine if row[3] != "open (not promised)"]
        held = sum(row[3] == "held" for row in promised)
        print(
            f"{where}: tried {len(mine)}, held {sum(row[3] == 'held' for row in mine)}"
            f" (promised {len(promised)}, held {held})"
        )
    opened = [row for row in rows if row[3] == "OPEN"]
    print("PASS every promised attack held" if not opened else f"MISS {len(opened)} open")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
