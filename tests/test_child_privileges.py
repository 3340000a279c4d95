"""A call's child cannot act on its worker (issue 26): env code runs in a plain fork of the
worker (`rlenv.worker.isolate`) that shares the worker's mount namespace and its private /tmp,
/var/tmp, $HOME and /dev/shm, so it must hold no capability and the worker must not be
dumpable. Each attack below runs as a tool of one real `rlenv run` and says CROSSED when the
kernel let it through: ptrace the worker, write its memory through /proc, take its private
mounts off or change them (directly, or from a user namespace of its own), join a namespace.
"""

from __future__ import annotations

import json
import secrets
import subprocess

import pytest

from tests.conftest import RLENV, ROOT

ATTACK_CODE = r"""
import ctypes, os

def _libc():
    return ctypes.CDLL(None, use_errno=True)

def _said(ok, what):
    return ("CROSSED " if ok else "held ") + what + ("" if ok else f" (errno {ctypes.get_errno()})")

def attack(kind):
    libc, parent = _libc(), os.getppid()
    if kind == "ptrace_attach":
        libc.ptrace.restype = ctypes.c_long
        done = libc.ptrace(16, parent, None, None) == 0  # PTRACE_ATTACH
        if done:
            os.waitpid(parent, 0)
            libc.ptrace(17, parent, None, None)  # PTRACE_DETACH
        return _said(done, f"ptrace attach to {parent}")
    if kind == "proc_mem_write":
        try:
            maps = open(f"/proc/{parent}/maps").read().splitlines()
            line = next(m for m in maps if m.split()[1].startswith("rw"))
            start = int(line.split("-")[0], 16)
            with open(f"/proc/{parent}/mem", "r+b", buffering=0) as memory:
                memory.seek(start)
                data = memory.read(8)
                memory.seek(start)
                memory.write(data)  # the same bytes back: the write is the attack
            return "CROSSED wrote the worker's memory"
        except (OSError, StopIteration) as exc:
            return f"held /proc/{parent}/mem: {exc}"
    if kind == "umount_tmp":
        return _said(libc.umount2(b"/tmp", 2) == 0, "umount /tmp")
    if kind == "remount_tmp":
        flags = 32 | 4096 | 1  # MS_REMOUNT | MS_BIND | MS_RDONLY
        return _said(libc.mount(None, b"/tmp", None, flags, None) == 0, "remount /tmp")
    if kind == "mount_over_tmp":
        return _said(libc.mount(b"x", b"/tmp", b"tmpfs", 0, None) == 0, "mount over /tmp")
    if kind == "setns_mount":
        fd = os.open(f"/proc/{parent}/ns/mnt", os.O_RDONLY)
        return _said(libc.setns(fd, 0x00020000) == 0, "setns into the worker's mount namespace")
    if kind == "userns_umount":  # a user namespace of its own: the inherited mounts stay locked
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            said = "held unshare"
            if libc.unshare(0x10000000 | 0x00020000) == 0:
                said = _said(libc.umount2(b"/tmp", 2) == 0, "umount /tmp in a new user namespace")
            os.write(write, said.encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        return os.read(read, 500).decode()
    if kind == "capabilities":
        lines = open("/proc/self/status").read().splitlines()
        status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        held = {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}
        capable = any(int(held[k], 16) for k in ("CapEff", "CapPrm", "CapBnd"))
        bad = capable or held["NoNewPrivs"] != "1"
        return ("CROSSED " if bad else "held ") + json.dumps(held)
    raise ValueError(kind)

def tool(args, ctx):
    try:
        return attack(args["kind"])
    except Exception as exc:
        return f"held {type(exc).__name__}: {exc}"

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"name": "tool", "arguments": messages[-1]["content"]}
        return {"tool_calls": [{"id": "c", "function": call}]}
    return messages[-1]["content"]

import json
"""

ATTACKS = (
    "ptrace_attach",
    "proc_mem_write",
    "umount_tmp",
    "remount_tmp",
    "mount_over_tmp",
    "setns_mount",
    "userns_umount",
    "capabilities",
)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.isolation_catalog import world_spec

    root = tmp_path_factory.mktemp("privileges")
    module = "privileges_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(ATTACK_CODE)
    inputs = [{"id": kind, "prompt": json.dumps({"kind": kind}), "answer": ""} for kind in ATTACKS]
    spec = world_spec(root, "privileges", module, inputs, ("tool", "an attack"), "^held")
    out = root / "run"
    command = [str(RLENV), "run", str(spec), "--out", str(out), "--json", "--concurrency", "1"]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        tools = [m for m in record["messages"] if m.get("role") == "tool"]
        found[record["input_id"]] = str(tools[-1]["content"]) if tools else str(record["error"])
    return found


@pytest.mark.parametrize("kind", ATTACKS)
def test_a_call_child_cannot_act_on_its_worker(answers: dict[str, str], kind: str) -> None:
    assert answers[kind].startswith("held"), f"{kind}: {answers[kind]}"


def test_a_call_child_keeps_the_private_places(answers: dict[str, str]) -> None:
    """Not vacuous: the attacks ran in the world (each answered), not as `unknown tool`."""
    assert set(answers) == set(ATTACKS)
    assert not [a for a in answers.values() if "unknown tool" in a], answers
