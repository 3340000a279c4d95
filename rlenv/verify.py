"""`rlenv verify`: the same run N times; identical digests, or the first divergence named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.errors import RunFailed, UserError
from rlenv.results import first_divergence, read_results
from rlenv.runner import DEFAULT_CONCURRENCY, RunSettings, run


@dataclass
class Verification:
    digests: list[str]
    divergence: dict[str, Any] | None
    labels: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return len(set(self.digests)) == 1


def verify(
    spec_path: str | Path,
    *,
    runs: int = 2,
    model: str | None = None,
    rollouts: int | None = None,
    limit: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    concurrencies: list[int] | None = None,
    base_url: str | None = None,
    keep: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    perturb: bool = False,
) -> Verification:
    """Run the env `runs` times into fresh directories and compare the run digests.

    With `perturb`, the repeats change the outside instead (reprotest's idea): the parent's hash
    seed, TZ, locale, working directory, concurrency, directory listing order and (with
    libfaketime) the host clock's date, moved by years.
    """
    if perturb:
        return _verify_perturbed(
            spec_path,
            model=model,
            rollouts=rollouts,
            limit=limit,
            concurrency=concurrency,
            base_url=base_url,
            keep=keep,
        )
    if runs < 2:
        raise UserError("--runs must be at least 2")
    root = Path(tempfile.mkdtemp(prefix="rlenv-verify-")) if keep is None else keep
    try:
        caches, labels = _cache_plan(spec_path, runs, root)
        digests: list[str] = []
        run_dirs: list[Path] = []
        cache_hits: list[int] = []
        for number, cache in enumerate(caches):
            level = concurrencies[number % len(concurrencies)] if concurrencies else concurrency
            result = run(
                spec_path,
                RunSettings(
                    model=model,
                    rollouts=rollouts,
                    limit=limit,
                    out=root / f"run-{number + 1}",
                    concurrency=level,
                    base_url=base_url,
                    grader_cache=cache,
                ),
                progress=progress,
            )
            digests.append(result.digest)
            run_dirs.append(result.run_dir)
            cache_hits.append(result.summary["grading"]["grader_cache"]["hits"])
        if labels:
            labels = [
                f"{label} ({hits} cached grades)"
                for label, hits in zip(labels, cache_hits, strict=True)
            ]
        return Verification(digests, _first_divergence(digests, run_dirs), labels)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def _cache_plan(
    spec_path: str | Path, runs: int, root: Path
) -> tuple[list[bool | Path], list[str]]:
    """Each run's grader cache, and its label (none when the env has no expensive verifier).

    With expensive verifiers the runs are uncached, then filling a fresh grader cache, then
    served from it (so at least three).
    """
    from rlenv.spec import load_spec

    if not any(v.cost == "expensive" for v in load_spec(spec_path).spec.verifiers):
        return [True] * runs, []
    runs = max(runs, 3)
    caches: list[bool | Path] = [False] + [root / "grader-cache"] * (runs - 1)
    return caches, ["uncached", "cache filled"] + ["cache hits"] * (runs - 2)


def _first_divergence(digests: list[str], run_dirs: list[Path]) -> dict[str, Any] | None:
    """Where the first run whose digest differs from run 1's first differs from it."""
    for number in range(1, len(digests)):
        if digests[number] != digests[0]:
            divergence = first_divergence(
                read_results(run_dirs[0] / "results.jsonl"),
                read_results(run_dirs[number] / "results.jsonl"),
            )
            if divergence is not None:
                divergence["runs"] = [1, number + 1]
            return divergence
    return None


PERTURBATIONS: list[tuple[str, dict[str, str], int | None]] = [
    ("hash seed", {"PYTHONHASHSEED": "12345"}, None),
    ("timezone", {"TZ": "Pacific/Kiritimati"}, None),
    ("locale", {"LC_ALL": "C", "LANG": "C"}, None),
    ("working directory", {}, None),
    ("concurrency", {}, 1),
    ("listing order", {"RLENV_PERTURB_LISTING": "reverse"}, None),
]


HOST_CLOCK_SHIFT = "+1096d"
"""How far the "host clock" perturbation moves the orchestrator's date (three years): a
real-clock read that reaches a result is then a different year, not a few seconds."""


def _perturbations() -> list[tuple[str, dict[str, str], int | None]]:
    """`PERTURBATIONS`, and the host clock moved by years under libfaketime when it is
    installed (the monotonic clock left real: the orchestrator's event loop keeps real time).
    The world's own clock is the spec's instant either way; a digest that changes with the
    host's date read a real clock somewhere."""
    from rlenv.sandbox import faketime_library, faketime_site_dir

    library = faketime_library()
    if library is None:
        return list(PERTURBATIONS)
    paths = [faketime_site_dir(), *filter(None, [os.environ.get("PYTHONPATH")])]
    clock = {
        "LD_PRELOAD": library,
        "FAKETIME": HOST_CLOCK_SHIFT,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join(paths),
    }
    return [*PERTURBATIONS, ("host clock", clock, None)]


def _verify_perturbed(
    spec_path: str | Path,
    *,
    model: str | None,
    rollouts: int | None,
    limit: int | None,
    concurrency: int,
    base_url: str | None,
    keep: Path | None,
) -> Verification:
    """A reference run here, then one run per perturbation in a fresh `rlenv run` process."""
    root = Path(tempfile.mkdtemp(prefix="rlenv-perturb-")) if keep is None else keep
    spec = Path(spec_path).resolve()
    options = {"--model": model, "--base-url": base_url, "--rollouts": rollouts, "--limit": limit}
    try:
        reference = run(
            spec,
            RunSettings(
                model=model,
                rollouts=rollouts,
                limit=limit,
                out=root / "reference",
                concurrency=concurrency,
                base_url=base_url,
            ),
        )
        digests, labels = [reference.digest], ["reference"]
        divergence = None
        for number, (label, changes, level) in enumerate(_perturbations(), start=1):
            out = root / f"perturbed-{number}"
            workdir = root / f"cwd-{number}"
            workdir.mkdir()
            command = _run_command(spec, out, level or max(2, concurrency + 1), options)
            digests.append(
                _perturbed_digest(
                    command,
                    label,
                    cwd=workdir if label == "working directory" else Path.cwd(),
                    env={**os.environ, **changes},
                )
            )
            labels.append(label)
            if digests[-1] != digests[0] and divergence is None:
                divergence = first_divergence(
                    read_results(root / "reference" / "results.jsonl"),
                    read_results(out / "results.jsonl"),
                )
                if divergence is not None:
                    divergence["runs"] = [1, number + 1]
                    divergence["perturbation"] = label
        return Verification(digests, divergence, labels)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def _run_command(spec: Path, out: Path, concurrency: int, options: dict[str, Any]) -> list[str]:
    """`rlenv run SPEC --out OUT --json --concurrency N` with the options that were given."""
    command = [
        sys.executable,
        "-m",
        "rlenv",
        "run",
        str(spec),
        "--out",
        str(out),
        "--json",
        "--concurrency",
        str(concurrency),
    ]
    for flag, value in options.items():
        if value is not None:
            command += [flag, str(value)]
    return command


def _perturbed_digest(command: list[str], label: str, *, cwd: Path, env: dict[str, str]) -> str:
    """Run one perturbed `rlenv run` process; its run digest, or RunFailed with its last line."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunFailed(f"perturbed run ({label}) failed: {message}")
    return str(json.loads(done.stdout)["digest"])
