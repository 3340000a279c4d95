"""The verifier sandbox, exercised with real subprocesses: normal grading, the frozen
environment, and escape attempts that must each end as a verifier failure with no harm done."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlenv import sandbox
from rlenv.sandbox import SandboxLimits, probe_mechanism, run_sandboxed, sandbox_python
from rlenv.verifiers.code import run_program_cases, run_python_tests
from tests.conftest import needs, require

MECHANISM = probe_mechanism()
ISOLATED = [m for m in ("bwrap", "unshare") if sandbox._mechanism_works(m)]
LIMITS = SandboxLimits(
    cpu_seconds=2, wall_seconds=5, memory_mb=256, file_size_mb=8, max_processes=8
)
SECRET = "SECRET-42"
REPO = Path(sandbox.__file__).resolve().parents[2]

# skip where the sandbox or libfaketime is missing, but fail under CI, which promises them
needs_isolation = needs(MECHANISM != "rlimits", "a namespace sandbox (bubblewrap or unshare)")
needs_faketime = needs(sandbox.faketime_library() is not None, "libfaketime")


def isolated_mechanisms() -> list[str]:
    return ISOLATED or ["missing"]


@pytest.fixture(params=isolated_mechanisms())
def mechanism(request: pytest.FixtureRequest) -> str:
    if request.param == "missing":
        require(False, "a namespace sandbox (bubblewrap or unshare)")
    return str(request.param)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def gold(tmp_path: Path) -> Path:
    """A gold answer outside the workdir, readable by everyone on the host."""
    folder = tmp_path / "gold"
    folder.mkdir()
    answer = folder / "answer.txt"
    answer.write_text(SECRET)
    answer.chmod(0o644)
    return answer


def processes_marked(token: str) -> list[int]:
    """Host pids whose command line or environment carries ``token`` (a run's own marker,
    so sandboxes of other test sessions running at the same time do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for name in ("cmdline", "environ"):
            try:
                if token.encode() in (entry / name).read_bytes():
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A token the test puts on its sandboxed processes; none may outlive the run."""
    token = f"rlenv-leftover-{secrets.token_hex(8)}"
    yield token
    assert processes_marked(token) == [], "sandboxed processes outlived the run"


def py(source: str) -> str:
    return textwrap.dedent(source).lstrip()


ATTACK_TEST = (
    "import solution\n\ndef test_attack():\n    result = solution.attack()\n"
    "    assert result == 'pwned', result\n"
)


def attack(
    code: str,
    workdir: Path,
    mechanism: str,
    hidden: list[Path] | None = None,
    limits: SandboxLimits = LIMITS,
) -> dict:
    """Grade an attack whose test passes only if the attack worked; it must fail cleanly."""
    verdict = run_python_tests(py(code), ATTACK_TEST, workdir, limits, hidden, mechanism=mechanism)
    assert verdict["passed"] is False, verdict
    assert verdict["score"] == 0.0
    assert verdict["mechanism"] == mechanism
    return verdict


# --------------------------------------------------------------------------- basics


def test_probe_reports_a_working_mechanism(workdir: Path) -> None:
    assert MECHANISM in sandbox.MECHANISMS
    assert probe_mechanism() == MECHANISM
    result = run_sandboxed(
        [sandbox_python(), "-c", "import os; print(os.getcwd())"], workdir, limits=LIMITS
    )
    assert result.returncode == 0, result
    assert result.mechanism == MECHANISM
    expected = sandbox.SANDBOX_WORKDIR if MECHANISM == "bwrap" else str(workdir.resolve())
    assert result.stdout.decode().strip() == expected


ADD = "def add(a, b):\n    return a + b\n"
TEST_STYLES = {
    "functions": "from solution import add\n\ndef test_small():\n    assert add(1, 2) == 3\n\n"
    "def test_negative():\n    assert add(-1, -2) == -3\n",
    "asserts": "from solution import add\nassert add(1, 2) == 3\nassert add(2, 2) == 4\n",
    "unittest": "import unittest\nfrom solution import add\n\nclass T(unittest.TestCase):\n"
    "    def test_one(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
    "    def test_two(self):\n        self.assertEqual(add(0, 0), 0)\n",
}


@pytest.mark.parametrize("style", sorted(TEST_STYLES))
def test_correct_solution_passes(style: str, workdir: Path) -> None:
    verdict = run_python_tests(ADD, TEST_STYLES[style], workdir, LIMITS)
    assert verdict == {
        "passed": True,
        "score": 1.0,
        "detail": verdict["detail"],
        "mechanism": MECHANISM,
    }
    assert verdict["detail"].startswith(("2/2", "1/1"))


def test_wrong_solution_scores_partially(workdir: Path) -> None:
    wrong = "def add(a, b):\n    return abs(a) + abs(b)\n"
    verdict = run_python_tests(wrong, TEST_STYLES["functions"], workdir, LIMITS)
    assert verdict["passed"] is False
    assert verdict["score"] == 0.5
    assert "1/2 tests passed" in verdict["detail"]
    assert "test_negative" in verdict["detail"]


def test_program_cases(workdir: Path) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b)\n"
    cases = [
        {"stdin": "1 2\n", "expected_stdout": "3\n"},
        {"stdin": "10 -4\n", "expected_stdout": "6"},
        {"stdin": "2 2\n", "expected_stdout": "5\n"},
    ]
    verdict = run_program_cases(code, cases, workdir, LIMITS)
    assert verdict["passed"] is False
    assert verdict["score"] == pytest.approx(2 / 3)
    assert "case 2: wrong answer" in verdict["detail"]
    assert run_program_cases(code, cases[:2], workdir, LIMITS)["passed"] is True


def test_forged_report_is_not_believed(workdir: Path) -> None:
    """A solution that prints a passing report and exits before the tests run fails."""
    code = py(
        """
        import os, sys
        print('{"passed": 9, "failed": 0, "failures": [], "output": ""}')
        sys.stdout.flush()
        os._exit(0)
        """
    )
    verdict = run_python_tests(code, TEST_STYLES["functions"], workdir, LIMITS)
    assert verdict["passed"] is False
    assert "did not load" in verdict["detail"]
    exits = run_python_tests("import sys\nsys.exit(0)\n", TEST_STYLES["asserts"], workdir, LIMITS)
    assert exits["passed"] is False
    assert "SystemExit" in exits["detail"]


# --------------------------------------------------------------------------- escapes


@needs_isolation
def test_escape_read_hidden_gold_outside_workdir(mechanism: str, workdir: Path, gold: Path) -> None:
    verdict = attack(
        f"""
        def attack():
            return open({str(gold)!r}).read().replace({SECRET!r}, 'pwned')
        """,
        workdir,
        mechanism,
        hidden=[gold.parent],
    )
    assert SECRET not in verdict["detail"]
    assert gold.read_text() == SECRET


@needs_isolation
def test_escape_read_hidden_gold_inside_workdir(mechanism: str, workdir: Path) -> None:
    (workdir / "gold").mkdir()
    (workdir / "gold" / "answer.txt").write_text(SECRET)
    (workdir / "expected.txt").write_text(SECRET)
    verdict = attack(
        """
        import os
        def attack():
            found = [os.listdir('gold')]
            for name in ('gold/answer.txt', 'expected.txt'):
                try:
                    found.append(open(name).read())
                except OSError as exc:
                    found.append(type(exc).__name__)
            print(found)
            return 'pwned' if any('SECRET' in str(f) for f in found) else found
        """,
        workdir,
        mechanism,
        hidden=[workdir / "gold", workdir / "expected.txt"],
    )
    assert SECRET not in verdict["detail"]
    assert (workdir / "gold" / "answer.txt").read_text() == SECRET
    assert (workdir / "expected.txt").read_text() == SECRET


@needs_isolation
def test_escape_write_outside_workdir(mechanism: str, workdir: Path, tmp_path: Path) -> None:
    token = secrets.token_hex(6)
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # the host would let anyone write here
    targets = [
        f"/tmp/rlenv-pwned-{token}",
        str(outside / f"pwned-{token}"),
        str(REPO / f"PWNED-{token}"),
        str(Path(sys.base_prefix) / f"pwned-{token}"),
    ]
    verdict = attack(
        f"""
        def attack():
            wrote = []
            for target in {targets!r}:
                try:
                    with open(target, 'w') as handle:
                        handle.write('pwned')
                    wrote.append(target)
                except OSError as exc:
                    print(target, type(exc).__name__)
            return 'pwned' if wrote else 'contained'
        """,
        workdir,
        mechanism,
    )
    for target in targets:
        assert not os.path.exists(target), target
    assert "AssertionError: contained" in verdict["detail"]


@needs_isolation
def test_escape_network_to_loopback_server(mechanism: str, workdir: Path) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        verdict = attack(
            f"""
            import socket
            def attack():
                for host in ('127.0.0.1', 'localhost'):
                    try:
                        socket.create_connection((host, {port}), timeout=2).sendall(b'hi')
                        return 'pwned'
                    except OSError as exc:
                        print(host, type(exc).__name__, exc)
                return 'refused'
            """,
            workdir,
            mechanism,
        )
        assert "refused" in verdict["detail"]
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # a finished handshake would be waiting here
    finally:
        server.close()


@needs_isolation
def test_escape_kill_the_parent(mechanism: str, workdir: Path) -> None:
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        verdict = attack(
            """
            import os, signal
            def attack():
                for target in (os.getppid(), -1, 1, 0):
                    try:
                        os.kill(target, signal.SIGKILL)
                    except OSError as exc:
                        print(target, type(exc).__name__)
                return 'still here'
            """,
            workdir,
            mechanism,
        )
        assert sentinel.poll() is None, "a host process was killed"
        os.kill(os.getpid(), 0)
        assert "failed" in verdict["detail"] or "0/1" in verdict["detail"]
    finally:
        sentinel.kill()
        sentinel.wait()


@needs_isolation
def test_escape_bounded_fork_bomb(workdir: Path, marker: str) -> None:
    verdict = attack(
        f"""
        import os
        def attack():
            children = 0
            try:
                while children < 5000:
                    if os.fork() == 0:
                        os.execv('/bin/sleep', [{marker!r}, '120'])
                    children += 1
            except OSError as exc:
                print('forks', children, type(exc).__name__)
            return 'pwned' if children >= 5000 else children
        """,
        workdir,
        MECHANISM,
    )
    # the test's assertion message carries the count the attack returned
    forks = int(verdict["detail"].split("AssertionError: ")[1].split(";")[0])
    assert 0 < forks < LIMITS.max_processes


@needs_isolation
def test_escape_classic_fork_bomb(workdir: Path, marker: str) -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=3, memory_mb=256, max_processes=8)
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = run_sandboxed(
        [sandbox_python(), "-c", bomb], workdir, limits=limits, env={"MARK": marker}
    )
    assert result.returncode != 0
    assert result.killed_by in {"wall", "cpu"}, result
    os.kill(os.getpid(), 0)


@needs_isolation
def test_escape_memory_hog(mechanism: str, workdir: Path) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"
    result = run_sandboxed(
        [sandbox_python(), "-c", code], workdir, limits=LIMITS, mechanism=mechanism
    )
    assert result.returncode != 0
    assert result.killed_by == "memory", result
    verdict = attack(
        f"def attack():\n    {code.replace(chr(10), chr(10) + '    ')}", workdir, mechanism
    )
    assert "MemoryError" in verdict["detail"]


@needs_isolation
def test_escape_infinite_loop_hits_cpu_limit(mechanism: str, workdir: Path) -> None:
    result = run_sandboxed(
        [sandbox_python(), "-c", "while True:\n    pass\n"],
        workdir,
        limits=LIMITS,
        mechanism=mechanism,
    )
    assert result.killed_by == "cpu", result
    assert result.timed_out is False


@needs_isolation
def test_escape_sleep_forever_hits_wall_limit(workdir: Path, marker: str) -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=2, memory_mb=256)
    verdict = attack(
        f"""
        import os, time
        def attack():
            if os.fork() == 0:
                os.setsid()  # a daemon that tries to outlive the run
                os.execv('/bin/sleep', [{marker!r}, '1000000'])
            time.sleep(10 ** 6)
        """,
        workdir,
        MECHANISM,
        limits=limits,
    )
    assert "wall-clock" in verdict["detail"]
    result = run_sandboxed(
        [sandbox_python(), "-c", "import time; time.sleep(10**6)"],
        workdir,
        limits=limits,
        env={"MARK": marker},
    )
    assert result.timed_out is True
    assert result.killed_by == "wall"


@needs_isolation
def test_escape_huge_file(mechanism: str, workdir: Path) -> None:
    verdict = attack(
        """
        def attack():
            with open('big.bin', 'wb') as handle:
                for _ in range(64):
                    handle.write(b'x' * (1024 * 1024))
            return 'pwned'
        """,
        workdir,
        mechanism,
    )
    assert "File too large" in verdict["detail"]
    assert not (workdir / "big.bin").exists()  # written on the sandbox's tmpfs, never the host


@needs_isolation
def test_escape_environment_and_host_files(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = secrets.token_hex(8)
    monkeypatch.setenv("RLENV_TEST_SECRET", token)
    verdict = attack(
        f"""
        import os
        def attack():
            seen = ' '.join(os.environ.values())
            for path in ('/proc/1/environ', '/etc/shadow', {sandbox.__file__!r}):
                try:
                    seen += open(path, errors='replace').read()
                except OSError as exc:
                    print(path, type(exc).__name__)
            return 'pwned' if {token!r} in seen or 'SANDBOX_UID' in seen else 'blind'
        """,
        workdir,
        MECHANISM,
    )
    assert token not in verdict["detail"]
    assert "blind" in verdict["detail"]


def test_escapes_in_program_cases_fail_cleanly(workdir: Path, gold: Path) -> None:
    """run_program_cases reports limit hits and crashes per case, never raises."""
    cases = [{"stdin": "", "expected_stdout": SECRET}]
    for code in (
        f"print(open({str(gold)!r}).read())",
        "import os\nos.kill(os.getppid(), 9)\nprint('x')",
        "while True:\n    pass",
    ):
        verdict = run_program_cases(code, cases, workdir, LIMITS, [gold.parent])
        if MECHANISM != "rlimits":
            assert verdict["passed"] is False, verdict
        assert verdict["mechanism"] == MECHANISM


# --------------------------------------------------------------------------- frozen world


@needs_faketime
@pytest.mark.parametrize(("tz", "local_hour"), [("UTC", 12), ("Asia/Tokyo", 21)])
def test_frozen_clock_inside(mechanism: str, workdir: Path, tz: str, local_hour: int) -> None:
    limits = SandboxLimits(frozen_time="2024-05-01T12:00:00+00:00", tz=tz)
    code = (
        "import subprocess, sys, threading, time\n"
        "t = time.time()\n"
        "time.sleep(0.01)\n"  # broken by libfaketime 0.9.10 on Python 3.11 without the shim
        "threading.Event().wait(0.01)\n"
        "subprocess.run([sys.executable, '-c', 'pass'], timeout=20)\n"
        "print(t, time.localtime(t).tm_hour)\n"
    )
    result = run_sandboxed(
        [sandbox_python(), "-s", "-c", code], workdir, limits=limits, mechanism=mechanism
    )
    assert result.returncode == 0, result
    seconds, hour = result.stdout.split()
    assert 0 <= float(seconds) - 1714564800 < 60  # the fake clock starts at the instant
    assert int(hour) == local_hour


PROBE = (
    "import locale, os, socket, sys, time\n"
    "print(hash('abc'), {'b', 'a', 'c'}, time.strftime('%Z'), locale.getpreferredencoding(),"
    " socket.gethostname(), os.getcwd(), sorted(os.environ))\n"
)


def test_hash_seed_tz_and_locale_fixed(workdir: Path) -> None:
    runs = [
        run_sandboxed([sandbox_python(), "-s", "-c", PROBE], workdir, limits=LIMITS).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert b"UTC UTF-8" in runs[0]
    reseeded = SandboxLimits(hash_seed=1)
    other = run_sandboxed([sandbox_python(), "-s", "-c", PROBE], workdir, limits=reseeded)
    assert other.stdout.split()[0] != runs[0].split()[0]  # the seed is really applied


def test_verdicts_are_deterministic(workdir: Path, tmp_path: Path) -> None:
    tests = TEST_STYLES["functions"] + "\ndef test_hash():\n    assert hash('abc') % 7 == 99\n"
    first = run_python_tests(ADD, tests, workdir, LIMITS)
    second_dir = tmp_path / "second"
    second = run_python_tests(ADD, tests, second_dir, LIMITS)
    assert first == second
    assert first["score"] == pytest.approx(2 / 3)
    crash = "def add(a, b):\n    raise RuntimeError('boom')\n"
    assert run_python_tests(crash, tests, workdir, LIMITS) == run_python_tests(
        crash, tests, second_dir, LIMITS
    )


def test_killed_by_signal_is_reported(workdir: Path) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    result = run_sandboxed([sandbox_python(), "-c", code], workdir, limits=LIMITS)
    assert result.killed_by == f"signal {int(signal.SIGTERM)}"


def test_output_is_capped(workdir: Path) -> None:
    code = "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 10000)\n"
    result = run_sandboxed([sandbox_python(), "-c", code], workdir, limits=LIMITS)
    assert result.returncode == 0
    assert len(result.stdout) == sandbox.OUTPUT_LIMIT
    assert result.truncated is True


def test_faketime_site_dir_is_shared_and_outlives_a_killed_process(tmp_path: Path) -> None:
    """The sleep shim's directory is one per user and shim content: a process killed before its
    exit handlers run (as a timed-out worker is) leaves no directory behind, and a directory of
    that name that is not a clean copy of ours is never used."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    code = "import os; from rlenv.sandbox import faketime_site_dir as f; print(f(), flush=True)"
    killer = code + "; os.kill(os.getpid(), 9)"
    made = [
        subprocess.run([sys.executable, "-c", c], env=env, capture_output=True, text=True)
        for c in (killer, killer, code)
    ]
    paths = {run.stdout.strip() for run in made}
    assert len(paths) == 1 and [p.name for p in tmp_path.iterdir()] == [Path(*paths).name]
    shared = Path(*paths)
    (shared / "sitecustomize.py").write_text("import evil\n")  # tampered: not ours any more
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    private = Path(again.stdout.strip())
    assert private != shared and not private.exists()  # a private copy, removed at exit
