"""An env whose python verifier reaches a helper module and a data file only when called, by
name (no import statement names them), and the attack on it: edit one of those files between a
run and its `--resume`. Shared by tests/test_fingerprint.py (a package directory) and
tests/test_trust_leftovers.py (a flat layout beside the spec)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import EnvBuilder, cli

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""
HELPER = """
def same(answer, expected):
    return answer == expected
"""


def verifier(helper_module: str, gold_file: str) -> str:
    """A verifier that imports `helper_module` and reads `gold_file` (beside it) at call time."""
    return f"""
import importlib
from pathlib import Path

def check(answer, input, ctx):
    helper = importlib.import_module("{helper_module}")
    gold = (Path(__file__).parent / "{gold_file}").read_text().split()
    return helper.same(answer, input["answer"]) and answer in gold
"""


def call_time_env(builder: EnvBuilder, package: str | None) -> Path:
    """The env in `builder.root`: in the python package `package`, or flat (`None`). Its files:
    verify.py (the verifier), helper_dyn.py, gold.txt, prefixed `flat_` when flat."""
    prefix, directory = ("flat_", builder.root) if package is None else ("", builder.root / package)
    module = "" if package is None else f"{package}."
    directory.mkdir(parents=True, exist_ok=True)
    if package is not None:
        (directory / "__init__.py").write_text("")
    verify = verifier(f"{module}{prefix}helper_dyn", f"{prefix}gold.txt")
    (directory / f"{prefix}verify.py").write_text(verify)
    (directory / f"{prefix}helper_dyn.py").write_text(HELPER)
    (directory / f"{prefix}gold.txt").write_text("a b\n")
    function = f"{module}{prefix}verify:check"
    return builder.write(POLICY, rollouts=1, verifiers=[{"type": "python", "function": function}])


def assert_resume_refuses_each_edit(spec: Path, out: Path, edited: list[Path]) -> None:
    """One run; a resume with nothing edited goes on (the control); then each file of `edited`,
    edited alone (and put back after), makes `--resume` exit 2 with one line naming the
    fingerprint."""

    def resume(*extra: str) -> subprocess.CompletedProcess[str]:
        return cli("run", str(spec), "--out", str(out), "--json", "--limit", "1", *extra)

    first = resume()
    assert first.returncode == 0, first.stderr
    same = resume("--resume")
    assert same.returncode == 0, same.stderr
    for path in edited:
        saved = path.read_bytes()
        path.write_bytes(saved + b"\n# edited: now a different verifier\n")
        resumed = resume("--resume")
        assert resumed.returncode == 2, (path.name, resumed.stdout + resumed.stderr)
        lines = resumed.stderr.strip().splitlines()
        assert len(lines) == 1 and "fingerprint" in lines[0], (path.name, resumed.stderr)
        path.write_bytes(saved)
