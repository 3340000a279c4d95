"""The catalog of attacks on the isolation of in-world code and of the code-verifier sandbox.

Shared by `tests/test_isolation.py` (every attack must be held) and `bench/isolation.py` (the
tried/held table). Each attack is real: in-world attacks run as a tool of a tiny env under the
real `rlenv run`, against real host listeners (an AF_UNIX socket at a path and in the abstract
namespace, a UDP socket, a TCP socket on loopback) with secrets set in the orchestrator's
environment; sandbox attacks run real programs through `rlenv.sandbox.run_sandboxed`.

An attack is *held* when the in-world code reports no success (it answers ``ESCAPED ...`` when
it got through) and no host listener saw anything from it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RLENV = Path(sys.executable).parent / "rlenv"

SECRET_VALUE = "sk-isolation-" + "7f3a9c1e5b2d4f60"
"""Set as OPENAI_API_KEY (and under another secret-looking name) in the orchestrator."""
OTHER_SECRET_NAME = "RLENV_TEST_DB_PASSWORD"

# -- in-world attacks: a tool of a tiny env ------------------------------------------------

ATTACKS_CODE = r"""
import ctypes, json, os, socket, subprocess, sys

SECRET = os.environ.get("ATTACK_SECRET_PROBE")  # never set: the value comes from the args

def _libc():
    return ctypes.CDLL(None, use_errno=True)

def _sockaddr_un(path):
    raw = path.encode() if isinstance(path, str) else path
    return b"\x01\x00" + raw + b"\x00" * (108 - len(raw))

def _sockaddr_in(port):
    return b"\x02\x00" + port.to_bytes(2, "big") + bytes([127, 0, 0, 1]) + b"\x00" * 8

def _environ_files():
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield f"/proc/{name}/environ"

def attack(args, ctx):
    name, secret = args["attack"], args["secret"]
    unix_path, abstract = args["unix_path"], args["abstract"]
    udp, tcp = int(args["udp"]), int(args["tcp"])
    if name == "env_os_environ":
        found = [key for key, value in os.environ.items() if secret in value]
        found += [
            key for key in ("OPENAI_API_KEY", args["other_name"])
            if os.environ.get(key, "REDACTED") != "REDACTED"
        ]
        if found:
            return f"ESCAPED os.environ has {sorted(set(found))}"
        return "held: " + ",".join(sorted(os.environ))
    if name == "env_proc_self":
        data = open("/proc/self/environ", "rb").read()
        return "ESCAPED /proc/self/environ" if secret.encode() in data else "held"
    if name == "env_proc_parent":
        pid, seen = os.getppid(), []
        while pid > 1:
            seen.append(pid)
            try:
                if secret.encode() in open(f"/proc/{pid}/environ", "rb").read():
                    return f"ESCAPED /proc/{pid}/environ (ancestor)"
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                pid = int(fields[1])
            except OSError as exc:
                return f"held: {exc}"
        return f"held: ancestors {seen}"
    if name == "env_proc_any":
        readable = 0
        for path in _environ_files():
            try:
                data = open(path, "rb").read()
            except OSError:
                continue
            readable += 1
            if secret.encode() in data:
                return f"ESCAPED {path}"
        return f"held: {readable} readable"
    if name == "env_subprocess":
        out = subprocess.run(["env"], capture_output=True, text=True).stdout
        return "ESCAPED env(1) printed it" if secret in out else "held"
    if name == "unix_path":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(unix_path)
        return "ESCAPED connected to " + unix_path
    if name == "unix_path_raw":
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.connect(unix_path)
        return "ESCAPED connected (_socket)"
    if name == "unix_path_ctypes":
        libc = _libc()
        fd = libc.socket(1, 1, 0)
        if fd < 0:
            return f"held: socket errno {ctypes.get_errno()}"
        address = _sockaddr_un(unix_path)
        if libc.connect(fd, address, len(address)) != 0:
            return f"held: connect errno {ctypes.get_errno()}"
        return "ESCAPED connected (libc)"
    if name == "unix_abstract":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + abstract)
        return "ESCAPED connected to the abstract socket"
    if name == "unix_abstract_raw":
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.connect("\0" + abstract)
        return "ESCAPED connected to the abstract socket (_socket)"
    if name == "udp_sendto":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"udp_sendto", ("127.0.0.1", udp))
        return "ESCAPED? sent"
    if name == "udp_sendmsg":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendmsg([b"udp_sendmsg"], [], 0, ("127.0.0.1", udp))
        return "ESCAPED? sent"
    if name == "udp_connect_send":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("127.0.0.1", udp))
        s.send(b"udp_connect_send")
        return "ESCAPED? sent"
    if name == "udp_raw":
        import _socket
        s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
        s.sendto(b"udp_raw", ("127.0.0.1", udp))
        return "ESCAPED? sent"
    if name == "udp_ctypes":
        libc = _libc()
        fd = libc.socket(2, 2, 0)
        if fd < 0:
            return f"held: socket errno {ctypes.get_errno()}"
        address = _sockaddr_in(udp)
        sent = libc.sendto(fd, b"udp_ctypes", 10, 0, address, len(address))
        return "ESCAPED? sent" if sent > 0 else f"held: sendto errno {ctypes.get_errno()}"
    if name == "udp_subprocess":
        code = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
            f"s.sendto(b'udp_subprocess', ('127.0.0.1', {udp}))"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if result.returncode:
            return "held: " + result.stderr.strip().splitlines()[-1]
        return "ESCAPED? sent"
    if name == "raw_socket":
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        header = (40000).to_bytes(2, "big") + udp.to_bytes(2, "big") + (18).to_bytes(2, "big")
        s.sendto(header + b"\x00\x00" + b"raw_socket", ("127.0.0.1", 0))
        return "ESCAPED? sent"
    if name == "packet_socket":
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        return "ESCAPED opened an AF_PACKET socket"
    if name == "tcp_raw":
        import _socket
        s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(("127.0.0.1", tcp))
        return "ESCAPED connected over TCP (_socket)"
    if name == "socketpair_works":
        left, right = socket.socketpair()
        left.sendall(b"ping")
        return "works" if right.recv(4) == b"ping" else "broken"
    raise ValueError(name)

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        call = {"name": "attack", "arguments": messages[-1]["content"]}
        return {"tool_calls": [{"id": "c", "function": call}]}
    return messages[-1]["content"]
"""


@dataclass(frozen=True)
class Attack:
    name: str
    group: str
    what: str
    control: bool = False  # must keep working (not an attack)


WORLD_ATTACKS = [
    Attack("env_os_environ", "secrets", "read OPENAI_API_KEY / *_PASSWORD from os.environ"),
    Attack("env_proc_self", "secrets", "read the secret from /proc/self/environ"),
    Attack("env_proc_parent", "secrets", "read /proc/<ancestor>/environ up to init"),
    Attack("env_proc_any", "secrets", "scan every readable /proc/*/environ"),
    Attack("env_subprocess", "secrets", "run env(1) in a subprocess"),
    Attack("unix_path", "unix", "connect to a host AF_UNIX listener by path"),
    Attack("unix_path_raw", "unix", "the same through _socket (past the Python guard)"),
    Attack("unix_path_ctypes", "unix", "the same through libc socket()/connect() (ctypes)"),
    Attack("unix_abstract", "unix", "connect to a host abstract-namespace AF_UNIX listener"),
    Attack("unix_abstract_raw", "unix", "the same through _socket"),
    Attack("udp_sendto", "udp", "UDP sendto a loopback listener"),
    Attack("udp_sendmsg", "udp", "UDP sendmsg"),
    Attack("udp_connect_send", "udp", "UDP connect + send"),
    Attack("udp_raw", "udp", "UDP sendto through _socket"),
    Attack("udp_ctypes", "udp", "UDP through libc socket()/sendto() (ctypes)"),
    Attack("udp_subprocess", "udp", "UDP sendto from a child interpreter"),
    Attack("raw_socket", "udp", "SOCK_RAW IP/UDP packet to loopback"),
    Attack("packet_socket", "udp", "open an AF_PACKET socket"),
    Attack("tcp_raw", "tcp", "TCP connect through _socket (past the Python guard)"),
    Attack("socketpair_works", "control", "socket.socketpair still works", control=True),
]


NOT_PROMISED_ON_RAY: set[str] = set()
"""What `--executor ray` does not hold: nothing more than locally. Env code runs in the local
worker an actor hosts (its own pid and network namespaces where the node can make them, as
here); it once ran in the actor itself, which shared the host's (/proc/PID/environ of
same-user processes readable, TCP past the Python guard going out)."""


@dataclass
class Outcome:
    attack: Attack
    held: bool
    detail: str


@contextmanager
def host_listeners() -> Iterator[dict[str, Any]]:
    """Real listeners on the host: AF_UNIX at a path and abstract, UDP and TCP on loopback."""
    folder = Path(tempfile.mkdtemp(prefix="rlenv-host-"))
    os.chmod(folder, 0o777)
    unix_path = str(folder / "host.sock")
    abstract = "rlenv-isolation-" + secrets.token_hex(6)
    unix_server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_server.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix_server.listen(64)
    abstract_server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_server.bind("\0" + abstract)
    abstract_server.listen(64)
    udp_server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp_server.bind(("127.0.0.1", 0))
    tcp_server = socket.socket()
    tcp_server.bind(("127.0.0.1", 0))
    tcp_server.listen(64)
    servers = [unix_server, abstract_server, udp_server, tcp_server]
    try:
        yield {
            "unix_path": unix_path,
            "abstract": abstract,
            "udp": udp_server.getsockname()[1],
            "tcp": tcp_server.getsockname()[1],
            "servers": {
                "unix": unix_server,
                "abstract": abstract_server,
                "udp": udp_server,
                "tcp": tcp_server,
            },
        }
    finally:
        for server in servers:
            server.close()
        with_suppressed(lambda: os.unlink(unix_path))
        with_suppressed(lambda: os.rmdir(folder))


def with_suppressed(action: Any) -> None:
    with suppress(OSError):
        action()


def _drain(servers: dict[str, socket.socket]) -> dict[str, list[str]]:
    """What reached each listener: accepted connections, received datagrams."""
    seen: dict[str, list[str]] = {name: [] for name in servers}
    for name, server in servers.items():
        server.setblocking(False)
        while True:
            try:
                if name == "udp":
                    data = server.recv(4096)
                    seen[name].append(data.decode("latin-1"))
                else:
                    connection, _ = server.accept()
                    connection.close()
                    seen[name].append("connection")
            except (BlockingIOError, OSError):
                break
    return seen


def write_attack_env(root: Path, listeners: dict[str, Any], attacks: list[Attack]) -> Path:
    """A tiny env: one input per attack, a python policy that calls the `attack` tool."""
    root.mkdir(parents=True, exist_ok=True)
    module = "isolation_attacks_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(ATTACKS_CODE)
    arguments = {
        "secret": SECRET_VALUE,
        "other_name": OTHER_SECRET_NAME,
        "unix_path": listeners["unix_path"],
        "abstract": listeners["abstract"],
        "udp": listeners["udp"],
        "tcp": listeners["tcp"],
    }
    inputs = [
        {"id": a.name, "prompt": json.dumps({"attack": a.name, **arguments}), "answer": ""}
        for a in attacks
    ]
    return world_spec(root, "isolation", module, inputs, ("attack", "run one attack"), "ESCAPED")


def orchestrator_environment() -> dict[str, str]:
    """The orchestrator's environment: this one plus secrets in play."""
    return {**os.environ, "OPENAI_API_KEY": SECRET_VALUE, OTHER_SECRET_NAME: SECRET_VALUE}


def run_world_attacks(
    workdir: Path,
    attacks: list[Attack] | None = None,
    executor: str = "local",
    detail_size: int = 160,
) -> list[Outcome]:
    """Every in-world attack as one input of a real `rlenv run`; judged per attack."""
    attacks = attacks or WORLD_ATTACKS
    with host_listeners() as listeners:
        spec = write_attack_env(workdir / "env", listeners, attacks)
        command = [str(RLENV), "run", str(spec), "--out", str(workdir / "run"), "--json"]
        command += ["--concurrency", "1"]
        if executor != "local":
            command += ["--executor", executor]
        result = subprocess.run(
            command,
            cwd=ROOT,
            env=orchestrator_environment(),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        seen = _drain(listeners["servers"])
    if result.returncode != 0:
        raise RuntimeError(f"rlenv run failed ({result.returncode}): {result.stderr[-2000:]}")
    records = {
        json.loads(line)["input_id"]: json.loads(line)
        for line in (workdir / "run" / "results.jsonl").read_text().splitlines()
    }
    outcomes = []
    for attack in attacks:
        record = records[attack.name]
        tool_messages = [m for m in record["messages"] if m.get("role") == "tool"]
        answer = str(tool_messages[-1]["content"]) if tool_messages else str(record.get("error"))
        if attack.control:
            outcomes.append(Outcome(attack, answer == "works", answer[:detail_size]))
            continue
        hit = {
            "unix": "unix_path",
            "abstract": "unix_abstract",
            "udp": "udp",
            "tcp": "tcp",
        }
        reached = [
            listener
            for listener, marks in seen.items()
            if marks and attack.name.startswith(hit[listener])
        ]
        if attack.group == "udp":
            reached = [m for m in seen["udp"] if m == attack.name]
        held = "ESCAPED" not in answer and not reached
        detail = answer if not reached else f"{answer} (listener saw {reached})"
        outcomes.append(Outcome(attack, held, detail[:detail_size]))
    return outcomes


# -- policy output: never on rlenv's stdout, kept in the record ----------------------------

NOISY_CODE = r"""
import os, subprocess, sys

print("IMPORT-TIME-PRINT")

def shout(args, ctx):
    print("TOOL-PRINT")
    os.write(1, b"TOOL-FD1\n")
    return "ok"

def policy(messages, tools, ctx):
    print("POLICY-PRINT")
    print("POLICY-STDERR", file=sys.stderr)
    sys.stdout.write("POLICY-UNFLUSHED")
    os.write(1, b"POLICY-FD1\n")
    os.write(2, b"POLICY-FD2\n")
    subprocess.run(["echo", "POLICY-SUBPROCESS"])
    subprocess.run(["sh", "-c", "echo POLICY-SUBPROCESS-ERR >&2"])
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "shout", "arguments": "{}"}}]}
    print("X" * 100000)
    return "a"
"""

NOISE_MARKERS = [
    "POLICY-PRINT",
    "POLICY-STDERR",
    "POLICY-UNFLUSHED",
    "POLICY-FD1",
    "POLICY-FD2",
    "POLICY-SUBPROCESS",
    "POLICY-SUBPROCESS-ERR",
    "TOOL-PRINT",
    "TOOL-FD1",
]


def write_noisy_env(root: Path) -> Path:
    import yaml

    from rlenv.canonical import sha256_file

    root.mkdir(parents=True, exist_ok=True)
    module = "noisy_" + secrets.token_hex(4)
    (root / f"{module}.py").write_text(textwrap.dedent(NOISY_CODE))
    inputs_path = root / "inputs.jsonl"
    inputs_path.write_text(json.dumps({"id": "a", "prompt": "p", "answer": "a"}) + "\n")
    document = {
        "name": "noisy",
        "seed": 3,
        "time": "2024-03-01T12:00:00+00:00",
        "model": f"python:{module}:policy",
        "inputs": {"path": "inputs.jsonl", "sha256": sha256_file(inputs_path)},
        "tools": [
            {
                "name": "shout",
                "function": f"{module}:shout",
                "description": "prints",
                "parameters": {"type": "object"},
            }
        ],
        "verifiers": [{"type": "exact_match", "expected_field": "answer"}],
        "rollouts": 2,
    }
    spec = root / "env.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


# -- the code-verifier sandbox as a whole ---------------------------------------------------

SANDBOX_ATTACKS = [
    Attack("fork_bomb", "sandbox", "fork until it fails; count the processes alive at once"),
    Attack("children_memory", "sandbox", "6 children x 400 MB under a 512 MB limit"),
    Attack("children_greedy", "sandbox", "16 children, each takes all it can, held at once"),
    Attack("threads_memory", "sandbox", "one process, 6 threads x 100 MB under 512 MB"),
    Attack("many_files", "sandbox", "100 files x 15 MB under the disk limit"),
    Attack("dev_shm", "sandbox", "fill /dev/shm, /tmp, /var/tmp (outside the workdir)"),
    Attack("proc1_cmdline", "sandbox", "/proc/1/cmdline, /proc/1/environ name no host path"),
    Attack("mountinfo", "sandbox", "/proc/self/mountinfo, environ name no host path (bwrap)"),
]
NOT_PROMISED = {("mountinfo", "unshare"), ("mountinfo", "rlimits")}
"""(attack, mechanism) pairs the mechanism does not claim to hold (unshare shows the host
file system, and the workdir at its host path, by design)."""

CHILDREN_GREEDY = r"""
import os, select
r, w = os.pipe()
go_r, go_w = os.pipe()
children = 0
for i in range(16):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(r)
        blocks = []
        try:
            while True:
                block = bytearray(4 * 1024 * 1024)
                for at in range(0, len(block), 4096):
                    block[at] = 1
                blocks.append(block)
        except MemoryError:
            pass
        os.write(w, b"%d\n" % (4 * len(blocks)))
        os.read(go_r, 1)
        os._exit(0)
    children += 1
os.close(w)
data = b""
while data.count(b"\n") < children:
    ready, _, _ = select.select([r], [], [], 20)
    if not ready:
        break
    chunk = os.read(r, 4096)
    if not chunk:
        break
    data += chunk
os.close(go_w)
print("ALLOCATED_MB", sum(int(x) for x in data.split()))
"""

CHILDREN_MEMORY = r"""
import os, sys
held = []
pids = []
r, w = os.pipe()
for i in range(6):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(r)
        try:
            block = bytearray(400 * 1024 * 1024)
            for at in range(0, len(block), 4096):
                block[at] = 1
            os.write(w, b"1")
            os.read(os.open("/dev/zero", os.O_RDONLY), 1)
            import time; time.sleep(3)
        except MemoryError:
            pass
        os._exit(0)
    pids.append(pid)
os.close(w)
got = 0
import select
while True:
    ready, _, _ = select.select([r], [], [], 6)
    if not ready:
        break
    chunk = os.read(r, 16)
    if not chunk:
        break
    got += len(chunk)
print("ALLOCATED_MB", got * 400)
"""

THREADS_MEMORY = r"""
import threading
blocks, got = [], []
def grab():
    try:
        block = bytearray(100 * 1024 * 1024)
        for at in range(0, len(block), 4096):
            block[at] = 1
        blocks.append(block)
        got.append(1)
    except MemoryError:
        pass
threads = []
for i in range(6):
    try:
        thread = threading.Thread(target=grab)
        thread.start()
        threads.append(thread)
    except RuntimeError:
        break
for thread in threads:
    thread.join()
print("ALLOCATED_MB", len(got) * 100)
"""

FORK_BOMB = r"""
import os, time
alive = 1
r, w = os.pipe()
children = []
for i in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(r)
        time.sleep(3)
        os._exit(0)
    children.append(pid)
print("PROCESSES", len(children) + 1)
"""

MANY_FILES = r"""
import os
written = 0
for i in range(100):
    try:
        with open(f"f{i}.bin", "wb") as handle:
            for _ in range(15):
                handle.write(b"x" * (1024 * 1024))
                written += 1
    except OSError:
        break
print("WRITTEN_MB", written)
"""

DEV_SHM = r"""
import os
written = 0
for folder in ("/dev/shm", "/tmp", "/var/tmp"):
    for i in range(20):
        try:
            with open(f"{folder}/x{i}.bin", "wb") as handle:
                handle.write(b"x" * (8 * 1024 * 1024))
                written += 8
        except OSError:
            break
print("WRITTEN_MB", written)
"""

PROC1 = r"""
import os
seen = []
for path in ("/proc/1/cmdline", "/proc/1/environ"):
    try:
        seen.append(open(path, "rb").read().replace(b"\0", b" ").decode("utf-8", "replace"))
    except OSError:
        pass
print("SEEN", "\n".join(seen))
"""

MOUNTINFO = PROC1.replace(
    '("/proc/1/cmdline", "/proc/1/environ")',
    '("/proc/self/mountinfo", "/proc/self/environ", "/proc/self/cmdline")',
)


def run_sandbox_attacks(tmp: Path, mechanism: str | None = None) -> list[Outcome]:
    """Each sandbox attack once under the best (or the given) mechanism, judged from what the
    program reports and what reached the host disk."""
    from rlenv.sandbox import SandboxLimits, run_sandboxed, sandbox_python

    limits = SandboxLimits(cpu_seconds=10, wall_seconds=30, memory_mb=512, file_size_mb=16)
    programs = {
        "fork_bomb": FORK_BOMB,
        "children_memory": CHILDREN_MEMORY,
        "children_greedy": CHILDREN_GREEDY,
        "mountinfo": MOUNTINFO,
        "threads_memory": THREADS_MEMORY,
        "many_files": MANY_FILES,
        "dev_shm": DEV_SHM,
        "proc1_cmdline": PROC1,
    }
    outcomes = []
    for attack in SANDBOX_ATTACKS:
        workdir = tmp / f"sandbox-{attack.name}" / "work"
        workdir.mkdir(parents=True)
        (workdir / "attack.py").write_text(programs[attack.name])
        result = run_sandboxed(
            [sandbox_python(), "-S", "attack.py"], workdir, limits=limits, mechanism=mechanism
        )
        out = result.stdout.decode("utf-8", "replace")
        on_host = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file()) // 2**20
        held, detail = _judge_sandbox(attack.name, out, limits, workdir, on_host)
        detail += f" [{result.mechanism}, exit {result.returncode}]"
        outcomes.append(Outcome(attack, held, detail[:200]))
    return outcomes


def _figure(out: str, label: str) -> int | None:
    for line in out.splitlines():
        if line.startswith(label + " "):
            return int(line.split()[1])
    return None


def _judge_sandbox(
    name: str, out: str, limits: Any, workdir: Path, on_host_mb: int
) -> tuple[bool, str]:
    if name == "fork_bomb":
        count = _figure(out, "PROCESSES")
        return count is not None and count <= limits.max_processes, f"{count} processes at once"
    if name in ("children_memory", "children_greedy", "threads_memory"):
        allocated = _figure(out, "ALLOCATED_MB")
        held = allocated is not None and allocated <= limits.memory_mb
        return held, f"{allocated} MB touched at once (limit {limits.memory_mb} MB)"
    if name == "many_files":
        written = _figure(out, "WRITTEN_MB")
        cap = limits.disk_mb
        held = written is not None and written <= cap and on_host_mb <= cap
        return held, f"{written} MB written inside, {on_host_mb} MB on the host (limit {cap} MB)"
    if name == "dev_shm":
        written = _figure(out, "WRITTEN_MB")
        return written == 0, f"{written} MB written outside the workdir"
    if name in ("proc1_cmdline", "mountinfo"):
        hosts = [str(workdir), str(workdir.parent), tempfile.gettempdir() + "/", str(ROOT)]
        leaked = [host for host in hosts if host in out]
        return "SEEN" in out and not leaked, f"host paths seen: {leaked or 'none'}"
    raise ValueError(name)


def world_spec(
    root: Path,
    name: str,
    module: str,
    inputs: list[dict[str, Any]],
    tool: tuple[str, str],
    pattern: str,
) -> Path:
    """An env whose python policy (``module:policy``) calls one tool (``module:<tool name>``)
    per input and passes when its answer matches ``pattern``: the shape of every in-world
    attack catalog (isolation, channels)."""
    import yaml

    from rlenv.canonical import sha256_file

    inputs_path = root / "inputs.jsonl"
    inputs_path.write_text("".join(json.dumps(record) + "\n" for record in inputs))
    document = {
        "name": name,
        "seed": 1,
        "time": "2024-03-01T12:00:00+00:00",
        "model": f"python:{module}:policy",
        "inputs": {"path": "inputs.jsonl", "sha256": sha256_file(inputs_path)},
        "tools": [
            {
                "name": tool[0],
                "function": f"{module}:{tool[0]}",
                "description": tool[1],
                "parameters": {"type": "object"},
            }
        ],
        "verifiers": [{"type": "regex", "pattern": pattern}],
        "rollouts": 1,
        "limits": {"timeout_s": 60, "max_turns": 3},
    }
    spec = root / "env.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec
