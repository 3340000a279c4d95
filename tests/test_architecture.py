"""The layers of DESIGN.md hold: import-linter's contracts in pyproject.toml pass, and break."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (import-linter)")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
    )


def test_layers_hold() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("rlenv/metrics/stats.py", "from rlenv import runner  # noqa"),
        ("rlenv/world/snapshot.py", "from rlenv.verifiers import builtin  # noqa"),
        ("rlenv/spec.py", "from rlenv import env  # noqa"),
        ("rlenv/commands/run.py", "from rlenv import cli  # noqa"),
    ],
)
def test_a_crossing_import_breaks_a_contract(tmp_path: Path, module: str, forbidden: str) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    shutil.copytree(ROOT / "rlenv", copy / "rlenv", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{forbidden}\n")
    result = _lint_imports(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
