"""Attacks on what a worker skips or reuses between rollouts to stay cheap.

A worker keeps an emptied workdir for its next rollout (a directory made and removed per
rollout cost milliseconds) and looks for leftover processes only when it might have any. Each
planting rollout below tries to leave something behind for the checking rollout after it, in
the same worker (one worker, rollouts in input order); the checking rollout says what it saw.
"""

from __future__ import annotations

import json
import platform

import pytest

from tests.conftest import EnvBuilder, cli, read_jsonl

PLANTER = """
import ctypes, json, os, signal, time

MARK = "1000.4243"
NAME = b"leak4243"  # a clone child's name (it never execs: an exec would make it a plain child)


def _sleep_forever():
    os.execv("/bin/sleep", ["sleep", MARK])


def _log(line):
    with open(os.environ["RLENV_TEST_LOG"], "a") as handle:
        handle.write(line + "\\n")


def plant(mode, workdir):
    if mode == "clone_child":  # exit signal 0: plain wait(-1) never sees this child
        libc = ctypes.PyDLL(None)  # the GIL held across the clone: the child can go on
        libc.syscall.restype = ctypes.c_long
        if libc.syscall(56, 0, 0, 0, 0, 0) == 0:  # x86-64 clone(flags=0)
            libc.prctl(15, NAME, 0, 0, 0)  # PR_SET_NAME
            while True:
                signal.pause()
    elif mode == "orphan":  # double fork, the middle reaped: the grandchild is re-parented
        middle = os.fork()
        if middle == 0:
            if os.fork() == 0:
                _sleep_forever()
            os._exit(0)
        os.waitpid(middle, 0)
    elif mode == "xattr":
        os.setxattr(".", "user.leak", b"from an earlier rollout")
    elif mode == "owner":
        try:  # a call's child has no capability left (CAP_CHOWN): the plant fails there
            os.chown(".", 4242, 4242)
        except PermissionError:
            pass
    elif mode == "mode":
        os.chmod(".", 0o777)
    elif mode == "grown":  # a directory keeps the size its entries gave it
        for number in range(500):
            open(f"entry-{number:0100d}", "w").close()
        for number in range(500):
            os.unlink(f"entry-{number:0100d}")
    elif mode == "times":
        os.utime(".", (4242, 4242))
    elif mode == "swapped":  # the workdir moved away, a link to a full directory in its place
        try:  # a local worker shows the workdir as a mount of its own: it does not move
            os.rename(workdir, workdir + "-moved")
        except OSError:
            return
        with open(workdir + "-moved/leak", "w") as handle:
            handle.write("from an earlier rollout")
        os.symlink(workdir + "-moved", workdir)
    elif mode == "file":
        with open("leak", "w") as handle:
            handle.write("from an earlier rollout")
    elif mode == "late_file":  # written once the worker has moved the workdir aside
        if os.fork() == 0:
            while os.path.isdir(workdir):
                pass
            with open("leak", "w") as handle:
                handle.write("written after the rollout")
            time.sleep(60)
    time.sleep(0.01)  # let a child reach its exec


def _leftovers():
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # dead, not yet reaped
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read()
            with open(f"/proc/{pid}/comm", "rb") as handle:
                name = handle.read().strip()
        except OSError:
            continue
        if MARK.encode() in command or name == NAME:
            found.append(pid)
    return found


def policy(messages, tools, ctx):
    kind, mode = messages[-1]["content"].split()
    if kind == "plant":
        plant(mode, os.getcwd())
        _log(f"planted {mode}")
        return "planted"
    status = os.lstat(".")
    seen = {
        "files": sorted(os.listdir(".")),
        "xattrs": sorted(os.listxattr(".")),
        "owner": [status.st_uid, status.st_gid],
        "mode": oct(status.st_mode & 0o7777),
        "size": [status.st_size, status.st_blocks, status.st_nlink],
        "mtime": status.st_mtime,
        "processes": _leftovers(),
    }
    _log(f"checked {mode}")
    return json.dumps(seen)
"""

PLANTS = [
    "clone_child",
    "orphan",
    "xattr",
    "owner",
    "mode",
    "grown",
    "times",
    "swapped",
    "file",
    "late_file",
]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One run, one worker: each plant, then a check; what each check saw, by plant."""
    root = tmp_path_factory.mktemp("reuse")
    inputs = [{"id": "first", "prompt": "check first", "answer": ""}]
    for mode in PLANTS:
        inputs.append({"id": f"plant-{mode}", "prompt": f"plant {mode}", "answer": ""})
        inputs.append({"id": f"check-{mode}", "prompt": f"check {mode}", "answer": ""})
    spec = EnvBuilder(root / "env").write(PLANTER, inputs=inputs, rollouts=1)
    log = root / "log"
    result = cli(
        "run",
        str(spec),
        "--out",
        str(root / "run"),
        "--json",
        "--concurrency",
        "1",
        env={"RLENV_TEST_LOG": str(log), "RLENV_WORLD_SHARED": str(root)},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    order = log.read_text().split("\n")
    for mode in PLANTS:  # each check ran after its plant: it could have seen what was left
        assert order.index(f"checked {mode}") > order.index(f"planted {mode}"), order
    records = read_jsonl(root / "run" / "results.jsonl")
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    return {
        record["input_id"].removeprefix("check-"): json.loads(record["answer"])
        for record in records
        if record["input_id"].startswith("check-") or record["input_id"] == "first"
    }


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the raw clone is x86-64's")
@pytest.mark.parametrize("mode", PLANTS)
def test_nothing_an_earlier_rollout_left_reaches_the_next(
    checked: dict[str, dict], mode: str
) -> None:
    fresh = checked["first"]
    assert fresh["files"] == [] and fresh["processes"] == []
    seen = checked[mode]
    assert seen["processes"] == [], f"{mode}: a process an earlier rollout started is alive"
    assert seen["files"] == [], f"{mode}: a file an earlier rollout left is in the workdir"
    assert seen["xattrs"] == fresh["xattrs"], f"{mode}: the workdir kept an extended attribute"
    assert seen["owner"] == fresh["owner"] and seen["mode"] == fresh["mode"], mode
    assert seen["size"] == fresh["size"], f"{mode}: the workdir kept the size it grew to"
    assert seen["mtime"] != 4242, f"{mode}: the workdir kept the times a rollout gave it"
