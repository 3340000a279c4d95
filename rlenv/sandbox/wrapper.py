"""Runs inside the sandbox just before the program: ``python -I -S wrapper.py SPEC_FD``.

(unshare only) sets the hostname and covers the /tmp-like dirs, the closed dirs and the hidden
paths, and mounts a size-capped tmpfs over the workdir; (bwrap and unshare) fills the workdir
from the seed archive; then sets the rlimits and no_new_privs (setuid binaries cannot
elevate), drops to the sandbox uid (as root, in a user namespace of its own), closes every
inherited descriptor above stderr, restores default signal dispositions (Python ignores
SIGPIPE/SIGXFSZ and exec would inherit that) and execs the program with a clean environment.

The sandbox runs this file under the sandboxed interpreter (a bwrap sandbox gets a copy at
``WRAPPER_INSIDE``, unshare reads it from a memfd), so it imports only the standard library
(and not ``typing``, to keep the start fast). The spec is the JSON ``rlenv.sandbox.run``
writes into the memfd ``SPEC_FD``: argv, env, cwd, uid, own_budget, rlimits, hostname, hide,
cover, keep, init, seed_fd, tmpfs, seccomp (a classic-BPF filter in hex, installed last: the
kernel keyring and SysV/POSIX IPC refused to the program and everything it starts).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
CLONE_NEWUSER = 0x10000000
CAPABILITY_VERSION_3 = 0x20080522


def _fail(message: str, code: int) -> NoReturn:
    sys.stderr.write(message)
    os._exit(code)


def _mount(
    libc: Any, src: bytes | None, dst: str, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    if libc.mount(src, dst.encode(), fstype, flags, data) != 0:
        error = ctypes.get_errno()
        _fail(f"sandbox: cannot mount on {dst}: {os.strerror(error)}\n", 125)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def set_hostname(name: str) -> None:
    try:
        import socket

        socket.sethostname(name)
    except OSError:
        pass


def cover_and_hide(spec: dict[str, Any]) -> None:
    """Cover world-writable dirs and dirs the sandbox uid cannot enter with empty read-only
    tmpfs, then bind back what the program needs inside them (the interpreter read-only, the
    workdir read-write), opened before they went out of sight; then hide the hidden paths."""
    libc = ctypes.CDLL(None, use_errno=True)
    cover = [d for d in spec.get("cover", []) if os.path.isdir(d)]
    keep = [(p, w, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p, w in spec.get("keep", [])]
    for directory in cover:
        _mount(libc, b"tmpfs", directory, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m")
    for path, writable, fd in keep:
        if any(_under(path, d) for d in cover):
            os.makedirs(path, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}".encode(), path, None, MS_BIND | MS_REC, None)
            if not writable:
                _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        os.close(fd)
    for directory in cover:
        _mount(libc, None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    for path, kind in spec.get("hide", []):
        if not os.path.lexists(path):
            continue  # already out of sight under a covered directory
        if kind == "dir":
            flags = MS_RDONLY | MS_NOSUID | MS_NODEV
            _mount(libc, b"tmpfs", path, b"tmpfs", flags, b"mode=0555")
        else:
            _mount(libc, b"/dev/null", path, None, MS_BIND, None)
            _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def fill_workdir(spec: dict[str, Any]) -> None:
    """(unshare) mount the size-capped tmpfs over the workdir; then unpack the seed archive
    (a copy of the host workdir) into it and hand it to the sandbox uid."""
    target = spec["cwd"]
    size = spec.get("tmpfs")
    if size:
        libc = ctypes.CDLL(None, use_errno=True)
        options = f"mode=0755,size={int(size)}".encode()
        _mount(libc, b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV, options)
    import tarfile

    with os.fdopen(spec["seed_fd"], "rb") as seed, tarfile.open(fileobj=seed, mode="r|") as tar:
        try:
            tar.extractall(target, filter="tar")
        except OSError as exc:  # the seed alone is over the disk limit
            _fail(f"sandbox: cannot fill the workdir: {exc}\n", 125)
    uid = spec.get("uid")
    if uid is not None:
        for root, dirs, files in os.walk(target):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), uid, uid)
        os.lchown(target, uid, uid)


def try_enter(cwd: str) -> bool:
    """Enter the workdir while still privileged when possible: its host parents may be closed
    to the sandbox uid, and an open cwd needs no search permission on them."""
    try:
        os.chdir(cwd)
    except OSError:
        return False
    return True


def set_no_new_privs() -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("sandbox: cannot set no_new_privs\n", 125)


def install_filter(code: bytes) -> None:
    """Install the seccomp filter ``code`` (``struct sock_filter`` array) on this process;
    no_new_privs is set already. Fail closed: the program never runs unfiltered."""
    import struct

    program = ctypes.create_string_buffer(code)
    fprog = ctypes.create_string_buffer(
        struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(program))
    )
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0) != 0:
        error = ctypes.get_errno()
        _fail(f"sandbox: cannot install the seccomp filter: {os.strerror(error)}\n", 125)


def drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def own_budget(uid: int) -> None:
    """(root) Enter a user namespace of this sandbox's own in which ``uid`` is host ``uid``.

    RLIMIT_NPROC counts the processes of a (user namespace, uid) pair. Run as host ``uid``
    in the host's namespace, every sandbox on the machine would draw on one budget of
    ``max_processes`` (two code verifiers at once: a program's fork fails or not by what the
    other does). A namespace made by root is limited at its own level only (its parent
    level is root's, unlimited), so each sandbox counts its own processes; the program still
    is ``uid`` inside, its files are owned by ``uid`` on the host, and it has no capability.
    A child of ours, still root in the parent namespace, writes the maps (a namespace's
    maps can name another uid only from outside it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    me = os.getpid()
    ready, go = os.pipe()
    helper = os.fork()
    if not helper:
        os.close(go)
        if os.read(ready, 1) != b"1":
            os._exit(1)
        try:
            for name in ("uid_map", "gid_map"):
                fd = os.open(f"/proc/{me}/{name}", os.O_WRONLY)
                os.write(fd, f"{uid} {uid} 1\n".encode())
                os.close(fd)
        except OSError as exc:
            _fail(f"sandbox: cannot map the sandbox uid: {exc}\n", 125)
        os._exit(0)
    os.close(ready)
    made = libc.unshare(CLONE_NEWUSER) == 0
    error = ctypes.get_errno()
    os.write(go, b"1" if made else b"0")
    os.close(go)
    _, status = os.waitpid(helper, 0)
    if not made:
        _fail(f"sandbox: cannot make a user namespace: {os.strerror(error)}\n", 125)
    if status:
        os._exit(125)  # the helper said why
    drop_to(uid)
    # Root in the parent namespace made this one: we hold every capability in it until the
    # program's exec, and the init of an unshare sandbox never execs. Drop them all now.
    header = ctypes.create_string_buffer(CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4))
    if libc.capset(header, ctypes.create_string_buffer(24)) != 0:
        _fail(f"sandbox: cannot drop capabilities: {os.strerror(ctypes.get_errno())}\n", 125)


def fork_as_init() -> None:
    """We are pid 1 of a fresh pid namespace (unshare). The kernel shields pid 1 from default
    signal actions (SIGXCPU, SIGTERM, SIGPIPE...), so run the program as our child, reap
    orphans, and report a death by signal N as 128 + N, the way bwrap does. Returns in the
    child only."""
    child = os.fork()
    if not child:
        return
    status = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def exec_program(argv: list[str], env: dict[str, str]) -> NoReturn:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
        signal.signal(sig, signal.SIG_DFL)
    os.closerange(3, 65536)  # the spec and seed memfds, anything else a launcher passed
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        _fail(f"sandbox: cannot execute {argv[0]}: {exc}\n", 127)


def main(spec: dict[str, Any]) -> NoReturn:
    if spec.get("hostname"):
        set_hostname(spec["hostname"])
    if spec.get("hide") or spec.get("cover"):
        cover_and_hide(spec)
    if spec.get("seed_fd") is not None:
        fill_workdir(spec)
    for name, value in spec["rlimits"]:
        resource.setrlimit(getattr(resource, name), tuple(value))
    entered = try_enter(spec["cwd"])
    set_no_new_privs()
    if spec.get("own_budget"):
        own_budget(spec["uid"])
    elif spec.get("uid") is not None:
        drop_to(spec["uid"])
    if not entered:
        os.chdir(spec["cwd"])
    if spec.get("seccomp"):
        install_filter(bytes.fromhex(spec["seccomp"]))
    if spec.get("init"):
        fork_as_init()
    exec_program(spec["argv"], spec["env"])


def read_spec(fd: int) -> dict[str, Any]:
    with os.fdopen(fd, "rb") as handle:
        return json.loads(handle.read())  # type: ignore[no-any-return]


if __name__ == "__main__":
    main(read_spec(int(sys.argv[1])))
