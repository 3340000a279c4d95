"""Each sandbox has a process budget of its own.

RLIMIT_NPROC counts the processes of a uid. As root every sandbox ran its program as host uid
nobody, so two sandboxes at once (two workers each running a code verifier) drew on one
``max_processes``: a model's program could fork or not by what the other sandbox was doing, a
verdict that depended on timing. Now each sandbox is a user namespace of its own, in which the
program is still nobody."""

from __future__ import annotations

import os
import select
import textwrap
from pathlib import Path

import pytest

from rlenv import sandbox
from rlenv.sandbox import SandboxLimits, run_sandboxed, sandbox_python
from rlenv.sandbox.mechanism import WEAK_SANDBOX_VARIABLE
from tests.conftest import require

LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=30, memory_mb=256, max_processes=8)
FORKS = 6  # with the program itself (and unshare's init) within 8, but two sandboxes' are not

# sh and sleep: the rlimits mechanism as root cannot run an interpreter under /root
HOLD = f"""
pids=''
trap 'kill $pids 2>/dev/null' EXIT
for i in $(seq {FORKS}); do sleep 30 & pids="$pids $!"; done
echo holding {FORKS}
read line
"""
FORK = f"""
pids=''
trap 'kill $pids 2>/dev/null' EXIT
for i in $(seq {FORKS}); do sleep 30 & pids="$pids $!"; done
echo forked {FORKS}
"""


def mechanisms() -> list[str]:
    found = [m for m in ("bwrap", "unshare") if sandbox._mechanism_works(m)]
    if os.geteuid() == 0:
        found.append("rlimits")  # as root it drops to nobody too
    return found or ["missing"]


@pytest.fixture(params=mechanisms())
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "missing":
        require(False, "a namespace sandbox (bubblewrap or unshare)")
    monkeypatch.setenv(WEAK_SANDBOX_VARIABLE, "1")
    return str(request.param)


def _read_line(fd: int, deadline: float) -> bytes:
    import time

    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


def test_two_sandboxes_at_once_each_have_max_processes(mechanism: str, tmp_path: Path) -> None:
    """One sandbox holds 6 processes (+ itself) while another starts 6: both fit in 8."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    seen: dict[str, object] = {}

    def while_holding(stdin: int, stdout: int, deadline: float) -> None:
        seen["first"] = _read_line(stdout, deadline)
        other = run_sandboxed(["/bin/sh", "-c", FORK], second, limits=LIMITS, mechanism=mechanism)
        seen["second"] = (other.returncode, other.stdout, other.stderr, other.killed_by)
        os.write(stdin, b"go\n")

    held = run_sandboxed(
        ["/bin/sh", "-c", HOLD], first, limits=LIMITS, mechanism=mechanism, interact=while_holding
    )
    assert seen["first"] == f"holding {FORKS}\n".encode(), (held, seen)
    assert seen["second"] == (0, f"forked {FORKS}\n".encode(), b"", None), seen
    assert held.returncode == 0, held


def test_the_budget_still_holds_within_a_sandbox(mechanism: str, tmp_path: Path) -> None:
    """Its own budget is still max_processes: 2 x 6 sleepers in one sandbox do not fit."""
    script = FORK.replace(f"seq {FORKS}", f"seq {2 * FORKS}")
    result = run_sandboxed(["/bin/sh", "-c", script], tmp_path, limits=LIMITS, mechanism=mechanism)
    assert result.returncode != 0, result
    assert b"fork" in result.stderr.lower(), result


NESTED = textwrap.dedent(
    """
    import ctypes, os, resource, time
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.unshare(0x10000000) == 0  # a user namespace of the program's own
    if made:
        for name, text in (("setgroups", "deny"), ("uid_map", "0 65534 1"),
                           ("gid_map", "0 65534 1")):
            with open("/proc/self/" + name, "w") as handle:
                handle.write(text)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (1000, 1000))
    except (ValueError, OSError):
        pass
    forks = 0
    while forks < 40:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        forks += 1
    print(made, os.getuid(), forks)
    """
)


def isolated() -> list[str]:
    return [m for m in ("bwrap", "unshare") if sandbox._mechanism_works(m)] or ["missing"]


@pytest.mark.parametrize("isolated_mechanism", isolated())
def test_a_namespace_of_its_own_does_not_widen_the_budget(
    isolated_mechanism: str, tmp_path: Path
) -> None:
    """The program makes a user namespace in which it is root, and forks: the sandbox's
    level still counts every process below it."""
    require(isolated_mechanism != "missing", "a namespace sandbox (bubblewrap or unshare)")
    result = run_sandboxed(
        [sandbox_python(), "-c", NESTED], tmp_path, limits=LIMITS, mechanism=isolated_mechanism
    )
    made, uid, forks = result.stdout.split()
    assert (made, uid) == (b"True", b"0"), result
    assert 0 < int(forks) < LIMITS.max_processes, result


IDENTITY = textwrap.dedent(
    """
    import os, pwd
    open("mine", "w").close()
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    init = dict(line.split(":", 1) for line in open("/proc/1/status"))
    print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), pwd.getpwuid(os.getuid())[0],
          os.stat("mine").st_uid, os.stat(".").st_uid, status["CapEff"].strip(),
          status["CapPrm"].strip(), open("/proc/self/uid_map").read().split())
    print("init", init["Uid"].split()[0], init["CapEff"].strip())
    """
)


@pytest.mark.parametrize("isolated_mechanism", isolated())
def test_the_program_still_is_nobody_with_no_capability(
    isolated_mechanism: str, tmp_path: Path
) -> None:
    require(isolated_mechanism != "missing", "a namespace sandbox (bubblewrap or unshare)")
    runs = [
        run_sandboxed(
            [sandbox_python(), "-c", IDENTITY],
            tmp_path,
            limits=LIMITS,
            mechanism=isolated_mechanism,
        )
        for _ in range(2)
    ]
    assert runs[0].stdout == runs[1].stdout, runs
    mine, init = runs[0].stdout.decode().splitlines()
    zero = "0000000000000000"
    uid_map = "['65534', '65534', '1']" if os.geteuid() == 0 else mine.split(" ", 9)[9]
    assert mine == f"65534 65534 65534 [] nobody 65534 65534 {zero} {zero} {uid_map}", runs[0]
    if isolated_mechanism == "unshare":  # its init is our wrapper: no capability left either
        assert init == f"init 65534 {zero}", runs[0]


def test_without_user_namespaces_the_sharing_is_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where root cannot make a user namespace the sandbox runs as before, and says so."""
    require(os.geteuid() == 0, "root (the budget is shared only as root)")
    mechanism = isolated()[0]
    require(mechanism != "missing", "a namespace sandbox (bubblewrap or unshare)")
    import rlenv.sandbox.mechanism as where
    import rlenv.sandbox.run as run

    monkeypatch.setattr(where, "own_budget_works", lambda: False)
    monkeypatch.setattr(run, "own_budget_works", lambda: False)
    result = run_sandboxed(
        [
            sandbox_python(),
            "-c",
            "import os; print(os.getuid(), open('/proc/self/uid_map').read())",
        ],
        tmp_path,
        limits=LIMITS,
        mechanism=mechanism,
    )
    assert result.stdout.split()[:2] == [b"65534", b"0"], result
    assert any("max_processes shared" in note for note in result.notes), result.notes
