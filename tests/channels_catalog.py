"""Channels between rollouts (issue 26 item 2): one rollout writes a token, a later one reads it.

Shared by `tests/test_isolation_channels.py` and `bench/isolation.py`. Each channel is a place
in the kernel or the file system that outlives the process that wrote it: the kernel keyring
(user, session and user-session keyrings), SysV shared memory and message queues, POSIX
message queues, an abstract AF_UNIX socket held by a left-behind process, and the shared
scratch directories (/dev/shm, /tmp). The same code runs as a tool of a real `rlenv run` and as
a program in the code-verifier sandbox (standard library only, C calls through ctypes: what
the model's code can do). A channel is *held* when the reader never sees the writer's token.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHANNEL_CODE = r"""
import builtins, ctypes, os, platform, socket, sys, time, types

_STORE = {}  # a module global: what a rollout leaves in the worker's python state

# made where this module is first imported (the worker, as it starts), as a reward model's
# joblib/loky makes its semaphores there: a worker keeps what it made before any call ran
_MADE_IN = os.getpid()
_KEPT = f"/dev/shm/sem.rlenv-kept-{_MADE_IN}"
try:
    import mmap
    with open(_KEPT, "xb+") as _handle:
        _handle.write(bytes(32))
        _handle.flush()
        _KEPT_MAP = mmap.mmap(_handle.fileno(), 32)  # shared, as sem_open maps it
except (OSError, ImportError):
    _KEPT_MAP = None

KEYRINGS = (-4, -3, -5)  # @u, @s, @us
SYSCALLS = {"x86_64": {"add_key": 248, "keyctl": 250}, "aarch64": {"add_key": 217, "keyctl": 219}}


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.shmat.restype = ctypes.c_void_p
    return libc


def _nr(name):
    return SYSCALLS[platform.machine()][name]


FOLDERS = {"dev_shm": "/dev/shm", "tmp": "/tmp", "var_tmp": "/var/tmp", "home": "~",
           "work_root": "..",  # work_root: beside the rollout's workdir (its cwd)
           "env_dir": os.path.dirname(os.path.abspath(__file__)),  # the env's own code
           "site_packages": __import__("sysconfig").get_paths()["purelib"],
           "etc": "/etc"}  # root-owned: a channel when the world runs as root


# what a call can set on the directory that holds its workdir (the work root, or the view a
# worker shows it in) instead of writing a file there: an attribute, its times, its mode
BESIDE = ("work_root_xattr", "work_root_times", "work_root_mode")


def _key(name):
    return 0x5EED0000 | (sum(name.encode()) & 0xFFFF)


def _errno(what):
    return f"{what} errno {ctypes.get_errno()}"


def _faketime_regions():
    # libfaketime's shared memory as mapped here: (start, end, path) per region
    found = []
    for line in open("/proc/self/maps"):
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "faketime_shm" in fields[5]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found.append((start, end, fields[5].strip().removesuffix(" (deleted)")))
    return found


def write(channel, name, token):
    libc, data = _libc(), token.encode()
    if channel == "keyring":
        done = []
        for ring in KEYRINGS:
            serial = libc.syscall(_nr("add_key"), b"user", name.encode(), data, len(data),
                                  ctypes.c_long(ring))
            done.append(str(serial) if serial >= 0 else _errno("add_key"))
        return "wrote " + ",".join(done)
    if channel == "sysv_shm":
        shm = libc.shmget(_key(name), 4096, 0o1000 | 0o666)  # IPC_CREAT
        if shm < 0:
            return _errno("shmget")
        address = libc.shmat(shm, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return _errno("shmat")
        ctypes.memmove(address, data + b"\0", len(data) + 1)
        return "wrote"
    if channel == "sysv_msg":
        queue = libc.msgget(_key(name), 0o1000 | 0o666)
        if queue < 0:
            return _errno("msgget")
        message = ctypes.create_string_buffer(8 + len(data))
        ctypes.memmove(message, (1).to_bytes(8, "little") + data, 8 + len(data))
        if libc.msgsnd(queue, message, len(data), 0o4000) != 0:  # IPC_NOWAIT
            return _errno("msgsnd")
        return "wrote"
    if channel == "posix_mq":
        queue = libc.mq_open(("/" + name).encode(), os.O_CREAT | os.O_RDWR, 0o666, None)
        if queue < 0:
            return _errno("mq_open")
        if libc.mq_send(queue, data, len(data), 0) != 0:
            return _errno("mq_send")
        return "wrote"
    if channel == "abstract_socket":
        try:
            import _socket
            server = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            server.bind("\0" + name)
            server.listen(4)
        except OSError as exc:
            return f"socket {exc}"
        if os.fork() == 0:  # a process left behind to answer the next rollout
            os.setsid()
            deadline = time.monotonic() + 60
            server.settimeout(1)
            while time.monotonic() < deadline:
                try:
                    connection, _ = server._accept()
                except OSError:
                    continue
                os.write(connection, data)
                os.close(connection)
            os._exit(0)
        return "wrote"
    if channel in BESIDE:  # on the directory that holds the rollout's workdir itself
        try:
            if channel == "work_root_xattr":
                os.setxattr("..", "user." + name, data)
            elif channel == "work_root_times":
                os.utime("..", (int(token), int(token)))
            else:
                os.chmod("..", int(token.removeprefix("mode-"), 8))
        except OSError as exc:
            return f"{channel} {exc}"
        return "wrote"
    if channel in FOLDERS:
        path = os.path.join(os.path.expanduser(FOLDERS[channel]), name)
        try:
            with open(path, "w") as handle:
                handle.write(token)
            os.chmod(path, 0o666)
        except OSError as exc:
            return f"open {exc}"
        return "wrote"
    if channel == "faketime_file":  # libfaketime's shared memory file, kept by the worker
        found = _faketime_regions() or [(0, 0, f"/dev/shm/faketime_shm_{os.getppid()}")]
        try:
            with open(found[0][2], "r+b") as handle:
                handle.seek(64)
                handle.write(data)
        except OSError as exc:
            return f"open {exc}"
        return "wrote"
    if channel.startswith("kept_semaphore") and os.getpid() == _MADE_IN:
        return "the semaphore was made in this process, not in its worker"
    if channel == "kept_semaphore_map":  # ... and by the mapping a fork inherits
        if _KEPT_MAP is None:
            return "no semaphore mapped"
        _KEPT_MAP[0:8] = data[:8].ljust(8, b"\0")
        return "wrote"
    if channel == "kept_semaphore":  # the worker's start-time semaphore, by its name
        try:
            with open(_KEPT, "r+b") as handle:
                handle.seek(32)
                handle.write(data)
        except OSError as exc:
            return f"open {exc}"
        return "wrote"
    if channel == "faketime_map":  # the same memory, mapped shared into every forked rollout
        found = _faketime_regions()
        if not found:
            return "no faketime shm mapped"
        ctypes.memmove(found[0][0], data[:8].ljust(8, b"\0"), 8)
        return "wrote"
    if channel == "py_global":
        _STORE[name] = token
    elif channel == "os_environ":
        os.environ[name] = token
    elif channel == "builtins":
        setattr(builtins, name, token)
    elif channel == "sys_modules":
        sys.modules[name] = types.SimpleNamespace(token=token)
    elif channel == "open_fd":  # a memfd left open in the process
        fd = os.memfd_create(name, 0)
        os.write(fd, data)
    else:
        raise ValueError(channel)
    return "wrote"


def read(channel, name):
    libc = _libc()
    if channel == "keyring":
        found = []
        for ring in KEYRINGS:
            serial = libc.syscall(_nr("keyctl"), 10, ctypes.c_long(ring), b"user",
                                  name.encode(), 0)  # KEYCTL_SEARCH
            if serial < 0:
                found.append(_errno("search"))
                continue
            buffer = ctypes.create_string_buffer(256)
            size = libc.syscall(_nr("keyctl"), 11, ctypes.c_long(serial), buffer, 256)
            found.append("read " + buffer.raw[: max(size, 0)].decode(errors="replace"))
        return "; ".join(found)
    if channel == "sysv_shm":
        shm = libc.shmget(_key(name), 0, 0)
        if shm < 0:
            return _errno("shmget")
        address = libc.shmat(shm, None, 0o10000)  # SHM_RDONLY
        if address in (None, ctypes.c_void_p(-1).value):
            return _errno("shmat")
        return "read " + ctypes.string_at(address).decode(errors="replace")
    if channel == "sysv_msg":
        queue = libc.msgget(_key(name), 0)
        if queue < 0:
            return _errno("msgget")
        message = ctypes.create_string_buffer(8 + 256)
        size = libc.msgrcv(queue, message, 256, 0, 0o4000)
        if size < 0:
            return _errno("msgrcv")
        return "read " + message.raw[8 : 8 + size].decode(errors="replace")
    if channel == "posix_mq":
        queue = libc.mq_open(("/" + name).encode(), os.O_RDONLY | os.O_NONBLOCK, 0, None)
        if queue < 0:
            return _errno("mq_open")
        buffer = ctypes.create_string_buffer(16384)
        size = libc.mq_receive(queue, buffer, 16384, None)
        if size < 0:
            return _errno("mq_receive")
        return "read " + buffer.raw[:size].decode(errors="replace")
    if channel == "abstract_socket":
        try:
            import _socket
            client = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            client.settimeout(5)
            client.connect("\0" + name)
            return "read " + client.recv(256).decode(errors="replace")
        except OSError as exc:
            return f"socket {exc}"
    if channel in BESIDE:
        try:
            if channel == "work_root_xattr":
                return "read " + os.getxattr("..", "user." + name).decode(errors="replace")
            status = os.stat("..")
            if channel == "work_root_times":
                return f"read {int(status.st_mtime)}"
            return f"read mode-{status.st_mode & 0o777:o}"
        except OSError as exc:
            return f"{channel} {exc}"
    if channel in FOLDERS:
        try:
            with open(os.path.join(os.path.expanduser(FOLDERS[channel]), name)) as handle:
                return "read " + handle.read()
        except OSError as exc:
            return f"open {exc}"
    if channel == "faketime_file":
        found = _faketime_regions() or [(0, 0, f"/dev/shm/faketime_shm_{os.getppid()}")]
        try:
            with open(found[0][2], "rb") as handle:
                return "read " + handle.read()[64:].decode(errors="replace")
        except OSError as exc:
            return f"open {exc}"
    if channel == "kept_semaphore_map":
        if _KEPT_MAP is None:
            return "no semaphore mapped"
        return "read " + _KEPT_MAP[0:8].decode(errors="replace")
    if channel == "kept_semaphore":
        try:
            with open(_KEPT, "rb") as handle:
                return "read " + handle.read()[32:].decode(errors="replace")
        except OSError as exc:
            return f"open {exc}"
    if channel == "faketime_map":
        found = _faketime_regions()
        if not found:
            return "no faketime shm mapped"
        return "read " + ctypes.string_at(found[0][0], 8).decode(errors="replace")
    if channel == "py_global":
        return "read " + str(_STORE.get(name))
    if channel == "os_environ":
        return "read " + str(os.environ.get(name))
    if channel == "builtins":
        return "read " + str(getattr(builtins, name, None))
    if channel == "sys_modules":
        return "read " + str(getattr(sys.modules.get(name), "token", None))
    if channel == "open_fd":
        for fd in os.listdir("/proc/self/fd"):
            try:
                if name in os.readlink(f"/proc/self/fd/{fd}"):
                    return "read " + os.pread(int(fd), 256, 0).decode(errors="replace")
            except OSError:
                continue
        return "no such fd"
    raise ValueError(channel)


def act(arguments):
    if arguments["mode"] == "write":
        return write(arguments["channel"], arguments["name"], arguments["token"])
    return read(arguments["channel"], arguments["name"])


def tool(args, ctx):
    try:
        return act(args)
    except Exception as exc:
        return f"error {type(exc).__name__}: {exc}"


def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"name": "tool", "arguments": messages[-1]["content"]}
        return {"tool_calls": [{"id": "c", "function": call}]}
    return messages[-1]["content"]


if __name__ == "__main__":
    import json
    print(act(json.loads(sys.argv[1])))
"""

SANDBOX_CHANNELS = (
    "keyring",
    "sysv_shm",
    "sysv_msg",
    "posix_mq",
    "abstract_socket",
    "dev_shm",
    "tmp",
    "var_tmp",
    "home",
    "site_packages",
    "etc",
)
"""Channels through the kernel or the file system: a program in the sandbox can try each
(site_packages: the interpreter's, which the user who made the venv may write; etc: /etc,
writable when the world runs as root, as in a container)."""
PYTHON_CHANNELS = (
    "py_global",
    "os_environ",
    "builtins",
    "sys_modules",
    "open_fd",
    "faketime_file",
    "faketime_map",
    "kept_semaphore",
    "kept_semaphore_map",
    "work_root",
    "work_root_xattr",
    "work_root_times",
    "work_root_mode",
    "env_dir",
)
"""Channels through the worker process's own state (a module's globals, its environment, a
patched builtin, an imported module, a file descriptor left open, libfaketime's shared memory
by its file or by the mapping a fork inherits, a semaphore the worker made as it started and
keeps), the directory beside
the rollout's workdir and the env's own directory (its code and data, which the user owns):
what one rollout leaves in a worker that serves the next."""
CHANNELS = SANDBOX_CHANNELS + PYTHON_CHANNELS

WORLD_NOT_PROMISED: set[str] = set()
"""Channels a local worker does not close: none. The work root beside a rollout's workdir was
one (shared by every worker of the run); a worker now covers it with an empty view holding
the call's own workdir only (`rlenv.worker.places.PrivatePlaces.show`)."""


def remove_left_files(names: dict[str, tuple[str, str]]) -> None:
    """Remove the files a crossing channel left in /etc or site-packages (the attack succeeded
    there: nothing of a test run should stay on the machine)."""
    import sysconfig

    for channel, folder in (("etc", "/etc"), ("site_packages", sysconfig.get_paths()["purelib"])):
        if channel in names:
            Path(folder, names[channel][0]).unlink(missing_ok=True)


@dataclass
class Crossing:
    """One channel tried once: what the writer said and what the reader saw."""

    channel: str
    wrote: str
    read: str
    token: str

    @property
    def held(self) -> bool:
        return self.token not in self.read


def new_names(channels: tuple[str, ...] = CHANNELS) -> dict[str, tuple[str, str]]:
    """A fresh (name, token) per channel: nothing an earlier test left can match."""
    tag = secrets.token_hex(5)
    names = {c: (f"rlenv-chan-{c}-{tag}", f"TOKEN-{c}-{tag}") for c in channels}
    if "faketime_map" in names:  # 8 bytes of libfaketime's memory: the token fits there
        names["faketime_map"] = (names["faketime_map"][0], f"T{tag[:7]}")
    if "work_root_times" in names:  # a time in seconds: the token is a number
        names["work_root_times"] = (names["work_root_times"][0], str(10**9 + int(tag, 16) % 10**8))
    if "work_root_mode" in names:  # a mode the view never has
        names["work_root_mode"] = (names["work_root_mode"][0], "mode-703")
    if "kept_semaphore_map" in names:  # 8 bytes of a semaphore's memory, likewise
        names["kept_semaphore_map"] = (names["kept_semaphore_map"][0], f"S{tag[:7]}")
    return names


def _requests(names: dict[str, tuple[str, str]], mode: str) -> list[dict[str, Any]]:
    return [
        {"mode": mode, "channel": channel, "name": name, "token": token}
        for channel, (name, token) in names.items()
    ]


def write_channel_env(root: Path, names: dict[str, tuple[str, str]], order: str) -> Path:
    """A tiny env with one input per (channel, mode); `order` "write-first" lists every write
    before every read, "read-first" the reads first."""
    from tests.isolation_catalog import world_spec

    root.mkdir(parents=True, exist_ok=True)
    module = "channels_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(CHANNEL_CODE)
    writes, reads = _requests(names, "write"), _requests(names, "read")
    ordered = writes + reads if order == "write-first" else reads + writes
    inputs = [
        {"id": f"{r['mode']}-{r['channel']}", "prompt": json.dumps(r), "answer": ""}
        for r in ordered
    ]
    return world_spec(
        root, "channels", module, inputs, ("tool", "write or read a channel"), "TOKEN"
    )


def run_world(
    spec: Path, out: Path, rlenv: Path, cwd: Path, extra: tuple[str, ...] = ()
) -> dict[str, str]:
    """`rlenv run` the channel env (one rollout at a time), with `extra` options (another
    executor); input id -> the tool's answer."""
    command = [str(rlenv), "run", str(spec), "--out", str(out), "--json", "--concurrency", "1"]
    command += extra
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise RuntimeError(f"rlenv run failed ({result.returncode}): {result.stderr[-2000:]}")
    answers = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        tools = [m for m in record["messages"] if m.get("role") == "tool"]
        answers[record["input_id"]] = str(tools[-1]["content"]) if tools else str(record["error"])
    return answers


_ORDERS = (("env1", "write-first"), ("env2", "read-first"))


def world_crossings(
    tmp: Path, rlenv: Path, cwd: Path, extra: tuple[str, ...] = ()
) -> list[Crossing]:
    """Two real runs of the channel env: the first writes every channel, then reads it in later
    rollouts (in-run); the second reads first (what the first run left), then writes again.
    `extra`: more `rlenv run` options (``--executor ray --workers 1``: one actor serves all)."""
    names = new_names()
    # the envs outside /tmp and $HOME (which are overlays in a worker): where a user keeps them
    envs = Path(tempfile.mkdtemp(prefix=".rlenv-channels-", dir=cwd))
    try:
        env1, env2 = (write_channel_env(envs / e, names, o) for e, o in _ORDERS)
        first = run_world(env1, tmp / "r1", rlenv, cwd, extra)
        second = run_world(env2, tmp / "r2", rlenv, cwd, extra)
    finally:
        remove_left_files(names)
        shutil.rmtree(envs, ignore_errors=True)
    crossings = []
    for channel, (_, token) in names.items():
        wrote = first[f"write-{channel}"]
        crossings.append(Crossing(channel, wrote, first[f"read-{channel}"], token))
        crossings.append(Crossing(channel + " (next run)", wrote, second[f"read-{channel}"], token))
    return crossings


def sandbox_crossings(tmp: Path, mechanism: str) -> list[Crossing]:
    """Each channel written in one sandboxed program and read in the next; then the other
    way round (the second program writes, a third reads)."""
    from rlenv.sandbox import SandboxLimits, run_sandboxed, sandbox_python

    limits = SandboxLimits(cpu_seconds=10, wall_seconds=30, memory_mb=512)
    names = new_names(SANDBOX_CHANNELS)

    def run(request: dict[str, Any], label: str) -> str:
        workdir = tmp / f"{mechanism}-{label}-{request['channel']}"
        workdir.mkdir(parents=True)
        (workdir / "channel.py").write_text(CHANNEL_CODE)
        argv = [sandbox_python(), "-S", "channel.py", json.dumps(request)]
        result = run_sandboxed(argv, workdir, limits=limits, mechanism=mechanism)
        return (result.stdout + result.stderr).decode("utf-8", "replace").strip()[-300:]

    crossings = []
    try:
        for channel, (name, token) in names.items():
            request = {"channel": channel, "name": name, "token": token}
            wrote = run({**request, "mode": "write"}, "w1")
            seen = run({**request, "mode": "read"}, "r1")
            crossings.append(Crossing(channel, wrote, seen, token))
            again = {**request, "token": token + "-again"}
            wrote = run({**again, "mode": "write"}, "w2")
            seen = run({**again, "mode": "read"}, "r2")
            crossings.append(Crossing(channel + " (again)", wrote, seen, again["token"]))
    finally:
        remove_left_files(names)
    return crossings


if __name__ == "__main__":  # pragma: no cover - a quick look by hand
    import tempfile

    here = Path(tempfile.mkdtemp(prefix="rlenv-channels-"))
    for crossing in sandbox_crossings(here, sys.argv[1] if len(sys.argv) > 1 else "bwrap"):
        print(crossing.held, crossing.channel, "|", crossing.wrote, "|", crossing.read)
