"""A seccomp filter on the socket families in-world code can open, enforced by the kernel.

The in-process guard (`rlenv.world.netguard`) patches Python's socket module, which code can
step around (`_socket`, ctypes, a child interpreter). This filter is below all of them, and a
process passes it on to every child it starts. In-world code may create:

- TCP sockets (AF_INET/AF_INET6, SOCK_STREAM, protocol 0 or TCP): the model or reward-model
  endpoint is reached that way, and every other destination is refused by the network
  namespace and the in-process guard;
- netlink sockets (what name resolution asks about local interfaces through);
- socket pairs (`socket.socketpair`, asyncio's self-pipe): a pair reaches nothing outside.

Everything else is refused with EACCES: AF_UNIX sockets (a filesystem or abstract listener on
the host), UDP and raw sockets, AF_PACKET, and every other family. io_uring, which can open and
connect sockets without the socket() system call, is refused, and so are system calls of
another ABI (x32, i386 compat), which the filter could not read the same way. The same filter
refuses the kernel's channels between rollouts (keyring, SysV and POSIX IPC) with EPERM
(`rlenv.world.seccomp`).
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct
from typing import Any

from rlenv.world import seccomp

_DENY = seccomp.refuse(errno.EACCES)

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

_installed_threads: set[int] = set()
_process_wide = False


def supported() -> bool:
    return seccomp.supported()


def _program() -> bytes:
    """The filter: the channel refusals (`rlenv.world.seccomp.CHANNEL_SYSCALLS`, EPERM), then
    the socket rules (EACCES)."""
    row = seccomp.numbers()
    ld, jeq, ret = seccomp.LD_W_ABS, seccomp.JEQ_K, seccomp.RET_K
    program: list[tuple[Any, ...]] = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 0, "deny", row["audit"]),
        (ld, 0, 0, 0),  # seccomp_data.nr
    ]
    if row["foreign"] is not None:
        program.append((seccomp.JGE_K, "deny", 0, row["foreign"]))
    program += seccomp.channel_checks("channel")
    program += [
        (jeq, "deny", 0, row["io_uring_setup"]),
        (jeq, 0, "allow", row["socket"]),
        (ld, 0, 0, 16),  # args[0]: the family (low 32 bits, little-endian)
        (jeq, "stream", 0, socket.AF_INET),
        (jeq, "stream", 0, socket.AF_INET6),
        (jeq, "allow", "deny", socket.AF_NETLINK),
        ("stream", ld, 0, 0, 24),  # args[1]: the type, without NONBLOCK/CLOEXEC
        (seccomp.AND_K, 0, 0, 0xF),
        (jeq, 0, "deny", socket.SOCK_STREAM),
        (ld, 0, 0, 32),  # args[2]: the protocol
        (jeq, "allow", 0, 0),
        (jeq, "allow", "deny", socket.IPPROTO_TCP),
        ("allow", ret, 0, 0, seccomp.ALLOW),
        ("deny", ret, 0, 0, _DENY),
        ("channel", ret, 0, 0, seccomp.refuse(errno.EPERM)),
    ]
    return seccomp.assemble(program)


def install(*, whole_process: bool) -> bool:
    """Install the filter on this thread (and what it starts), or with ``whole_process`` on
    every thread of the process; once per thread. False when it cannot be installed here."""
    global _process_wide
    import threading

    if _process_wide or threading.get_ident() in _installed_threads:
        return True
    if not supported():
        return False
    code = _program()
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    # without CAP_SYS_ADMIN the kernel requires no_new_privs before a filter
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    if whole_process:
        nr_seccomp = seccomp.numbers()["seccomp"]
        result = libc.syscall(
            nr_seccomp, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, fprog_buffer
        )
    else:
        result = libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog_buffer, 0, 0)
    if result != 0:
        return False
    if whole_process:
        _process_wide = True
    else:
        _installed_threads.add(threading.get_ident())
    return True
