"""A python that starts warm, for tests that run the same heavy interpreter many times.

`rlenv import inspect` runs its loader in a python with inspect_ai, a fresh interpreter per
import: about 4 s of CPU importing inspect_ai each time, most of the Inspect tests' CPU. Here
one server process of that python imports the modules once and forks a child per request; a
shim executable (given to rlenv as `--python`) sends it its argv, cwd, environment and its
own stdin/stdout/stderr (the descriptors themselves, over a unix socket), and exits with the
child's exit code. The script then runs as `python SCRIPT ARGS` would run it (`__main__`,
`sys.argv`, `sys.path[0]`), in the real interpreter of that venv, its output written straight
to the pipes rlenv reads. What a fork shares with its siblings is the server's state after the
preload: the same hash seed in every child (a test of determinism across processes uses the
real interpreter, not this).

    python warm_python.py serve SOCKET MODULE...   (in the venv: preload, then serve)
"""

from __future__ import annotations

import array
import contextlib
import importlib
import json
import os
import runpy
import select
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SHIM = """#!{python} -IS
import array, json, os, socket, struct, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.connect({socket!r})
request = json.dumps({{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
header = struct.pack("!I", len(request))
descriptors = array.array("i", [0, 1, 2])
connection.sendmsg([header + request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, descriptors)])
status = b""
while len(status) < 4:
    part = connection.recv(4 - len(status))
    if not part:
        sys.exit("warm python: the server closed the connection")
    status += part
sys.exit(struct.unpack("!i", status)[0])
"""


def _receive(connection: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, ancillary, _, _ = connection.recvmsg(1 << 16, socket.CMSG_LEN(3 * 4))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    (size,) = struct.unpack("!I", data[:4])
    body = data[4:]
    while len(body) < size:
        body += connection.recv(size - len(body))
    return json.loads(body), list(fds)


def _run(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become `python SCRIPT ARGS` and exit with its code."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[call-overload]
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    code = 0
    try:
        sys.argv = argv[1:]
        sys.path[0] = str(Path(argv[1]).resolve().parent)
        runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve(path: str, modules: list[str]) -> None:
    for module in modules:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    print("ready", flush=True)
    while True:  # one request at a time: each is a whole `python SCRIPT` run
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return  # the test process is gone (its end of our stdin closed): so are we
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        with connection:
            request, fds = _receive(connection)
            child = os.fork()
            if child == 0:
                listener.close()
                connection.close()
                _run(request, fds)
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            connection.sendall(struct.pack("!i", code if code >= 0 else 128 - code))


@contextlib.contextmanager
def warm_python(python: Path, modules: list[str], directory: Path) -> Iterator[Path]:
    """A shim in `directory` that runs `python SCRIPT ARGS` in a fork of a `python` that has
    imported `modules`; the server is stopped when the context ends."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "warm.sock"
    server = subprocess.Popen(
        [str(python), __file__, "serve", str(path), *modules],
        stdout=subprocess.PIPE,
        text=True,
        stdin=subprocess.PIPE,  # closed when this process ends, however it ends
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready", f"exit {server.wait()}"
        shim = directory / "python"
        shim.write_text(SHIM.format(python=sys.executable, socket=str(path)))
        shim.chmod(0o755)
        yield shim
    finally:
        server.kill()
        server.wait()
        for pipe in (server.stdin, server.stdout):
            if pipe is not None:
                pipe.close()


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) < 3:
        sys.exit(__doc__)
    serve(sys.argv[2], sys.argv[3:])
