"""`rlenv verify`: the same run N times; identical digests, or the first divergence named."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.results import first_divergence, read_results
from rlenv.runner import DEFAULT_CONCURRENCY, run


@dataclass
class Verification:
    digests: list[str]
    divergence: dict[str, Any] | None

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
) -> Verification:
    """Run the env `runs` times into fresh directories and compare the run digests."""
    from rlenv.errors import UserError

    if runs < 2:
        raise UserError("--runs must be at least 2")
    root = Path(tempfile.mkdtemp(prefix="rlenv-verify-")) if keep is None else keep
    try:
        digests: list[str] = []
        run_dirs: list[Path] = []
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
            )
            digests.append(result.digest)
            run_dirs.append(result.run_dir)
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
        return Verification(digests, divergence)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
