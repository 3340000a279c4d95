"""`rlenv verify`: the same run N times; identical digests, or the first divergence named."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlenv.results import first_divergence, read_results
from rlenv.runner import DEFAULT_CONCURRENCY, run


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
    seed, TZ, locale, working directory, concurrency and directory listing order.
    """
    from rlenv.errors import UserError

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
    from rlenv.spec import load_spec

    root = Path(tempfile.mkdtemp(prefix="rlenv-verify-")) if keep is None else keep
    # with expensive verifiers: uncached, then filling a fresh grader cache, then served from it
    expensive = any(v.cost == "expensive" for v in load_spec(spec_path).spec.verifiers)
    caches: list[bool | Path] = [True] * runs
    labels: list[str] = []
    if expensive:
        runs = max(runs, 3)
        caches = [False] + [root / "grader-cache"] * (runs - 1)
        labels = ["uncached", "cache filled"] + ["cache hits"] * (runs - 2)
    try:
        digests: list[str] = []
        run_dirs: list[Path] = []
        cache_hits: list[int] = []
        for number in range(runs):
            level = concurrencies[number % len(concurrencies)] if concurrencies else concurrency
            result = run(
                spec_path,
                model=model,
                rollouts=rollouts,
                limit=limit,
                out=root / f"run-{number + 1}",
                concurrency=level,
                base_url=base_url,
                progress=progress,
                grader_cache=caches[number],
            )
            digests.append(result.digest)
            run_dirs.append(result.run_dir)
            cache_hits.append(result.summary["grading"]["grader_cache"]["hits"])
        divergence = None
        for number in range(1, runs):
            if digests[number] != digests[0]:
                divergence = first_divergence(
                    read_results(run_dirs[0] / "results.jsonl"),
                    read_results(run_dirs[number] / "results.jsonl"),
                )
                if divergence is not None:
                    divergence["runs"] = [1, number + 1]
                break
        if expensive:
            labels = [
                f"{label} ({hits} cached grades)"
                for label, hits in zip(labels, cache_hits, strict=True)
            ]
        return Verification(digests, divergence, labels)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


PERTURBATIONS: list[tuple[str, dict[str, str], int | None]] = [
    ("hash seed", {"PYTHONHASHSEED": "12345"}, None),
    ("timezone", {"TZ": "Pacific/Kiritimati"}, None),
    ("locale", {"LC_ALL": "C", "LANG": "C"}, None),
    ("working directory", {}, None),
    ("concurrency", {}, 1),
    ("listing order", {"RLENV_PERTURB_LISTING": "reverse"}, None),
]


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
    import json
    import os
    import subprocess
    import sys

    from rlenv.errors import RunFailed

    root = Path(tempfile.mkdtemp(prefix="rlenv-perturb-")) if keep is None else keep
    spec = Path(spec_path).resolve()
    try:
        reference = run(
            spec,
            model=model,
            rollouts=rollouts,
            limit=limit,
            out=root / "reference",
            concurrency=concurrency,
            base_url=base_url,
        )
        digests, labels = [reference.digest], ["reference"]
        divergence = None
        for number, (label, changes, level) in enumerate(PERTURBATIONS, start=1):
            out = root / f"perturbed-{number}"
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
                str(level or max(2, concurrency + 1)),
            ]
            for flag, value in (
                ("--model", model),
                ("--base-url", base_url),
                ("--rollouts", rollouts),
                ("--limit", limit),
            ):
                if value is not None:
                    command += [flag, str(value)]
            workdir = root / f"cwd-{number}"
            workdir.mkdir()
            done = subprocess.run(
                command,
                cwd=workdir if label == "working directory" else Path.cwd(),
                env={**os.environ, **changes},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                message = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RunFailed(f"perturbed run ({label}) failed: {message}")
            digests.append(json.loads(done.stdout)["digest"])
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
