"""What graded code can see: the project's files are hidden under every namespace mechanism.

The "solution" opens, by absolute path, the files a cheating model would want (the project,
its spec and helper modules, the cassettes, the held-out inputs and preference data, the
caller's caches) and the process information that could point at them or carry secrets
(/proc/1/cmdline, the parent's and every visible process's environ and cmdline). It prints
what it could read; the case expects nothing. Each mechanism this machine has is tried (forced,
so a machine with bubblewrap also checks the `unshare` fallback); under `rlimits` nothing is
hidden, which is why code verifiers refuse it without --allow-weak-sandbox.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlenv.sandbox import SandboxLimits
from rlenv.sandbox.run import _mechanism_works
from rlenv.verifiers.code import run_program_cases
from tests.conftest import ROOT, require

CANARY = "rlenv-canary-3f9a1c"
LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=20, memory_mb=256)


def _targets(cache: Path) -> list[str]:
    """Files worth stealing, each world-readable on the host (the probe reads them first)."""
    return [
        str(ROOT / "README.md"),
        str(ROOT / "envs" / "search.yaml"),
        str(ROOT / "envs" / "search_env" / "service.py"),
        str(ROOT / "fixtures" / "search" / "prefs_heldout.jsonl"),
        str(ROOT / "fixtures" / "search" / "questions.jsonl"),
        str(next((ROOT / "fixtures" / "search" / "cassettes").iterdir())),
        str(ROOT / "rlenv" / "sandbox" / "wrapper.py"),
        str(cache / "grades.txt"),
        str(Path.home() / ".cache"),
    ]


PEEK = """
import json, os
TARGETS = json.loads({targets!r})
ROOT, CANARY = {root!r}, {canary!r}
leaks = []
for path in TARGETS:
    try:
        if os.path.isdir(path):
            if os.listdir(path):
                leaks.append("list " + path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
            leaks.append("read " + path)
    except OSError:
        pass
for pid in ["1", "self", str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]:
    for name in ("cmdline", "environ"):
        try:
            with open(f"/proc/{{pid}}/{{name}}", "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        if ROOT in text or CANARY in text:
            leaks.append(f"/proc/{{pid}}/{{name}}")
print("\\n".join(sorted(set(leaks))))
"""


def _host_can_read(path: str) -> bool:
    """The sandbox uid (nobody) could read it on the host: only isolation can hide it."""
    mode = os.stat(path).st_mode
    return bool(mode & 0o004)


@pytest.mark.parametrize("mechanism", ["bwrap", "unshare"])
def test_graded_code_sees_none_of_the_project(
    mechanism: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(_mechanism_works(mechanism), f"the {mechanism} sandbox")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "grades.txt").write_text("cached verdicts")
    for folder in (tmp_path, cache):
        folder.chmod(0o755)
    (cache / "grades.txt").chmod(0o644)
    monkeypatch.setenv("RLENV_TEST_SECRET", CANARY)  # in this (the caller's) environment
    targets = _targets(cache)
    assert all(_host_can_read(path) for path in targets if not path.endswith(".cache")), targets
    code = PEEK.format(targets=json.dumps(targets), root=str(ROOT), canary=CANARY)
    outcome = run_program_cases(
        code,
        [{"stdin": "", "expected_stdout": ""}],
        tmp_path / "work",
        LIMITS,
        mechanism=mechanism,
    )
    assert outcome["passed"], outcome["detail"]
    assert outcome["mechanism"] == mechanism


def test_the_probe_reads_the_project_without_a_sandbox(tmp_path: Path) -> None:
    """Control: the same program on the host, as the caller, reads every target."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "grades.txt").write_text("cached verdicts")
    targets = _targets(cache)[:-1]
    code = PEEK.format(targets=json.dumps(targets), root=str(ROOT), canary=CANARY)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLENV_TEST_SECRET": CANARY},
    )
    leaks = result.stdout.split("\n")
    assert {f"read {path}" for path in targets} <= set(leaks), result.stdout
    assert "/proc/self/environ" in leaks
