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
another ABI (x32, i386 compat), which the filter could not read the same way.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct
from typing import Any

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06

_ALLOW = 0x7FFF0000
_DENY = 0x00050000 | errno.EACCES

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

# (audit arch, socket, io_uring_setup, seccomp, first syscall of a foreign ABI or None)
_ARCHES = {
    "x86_64": (0xC000003E, 41, 425, 317, 0x40000000),
    "aarch64": (0xC00000B7, 198, 425, 277, None),
}

_installed_threads: set[int] = set()
_process_wide = False


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in _ARCHES


def _program() -> list[tuple[int, int, int, int]]:
    """The filter, as (code, jump if true, jump if false, k) instructions."""
    arch, nr_socket, nr_io_uring, _, foreign = _ARCHES[platform.machine()]
    allow, deny = "allow", "deny"
    program: list[tuple[Any, ...]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 0, deny, arch),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if foreign is not None:
        program.append((_JGE_K, deny, 0, foreign))
    program += [
        (_JEQ_K, deny, 0, nr_io_uring),
        (_JEQ_K, 0, allow, nr_socket),
        (_LD_W_ABS, 0, 0, 16),  # args[0]: the family (low 32 bits, little-endian)
        (_JEQ_K, "stream", 0, socket.AF_INET),
        (_JEQ_K, "stream", 0, socket.AF_INET6),
        (_JEQ_K, allow, deny, socket.AF_NETLINK),
        ("stream", _LD_W_ABS, 0, 0, 24),  # args[1]: the type, without NONBLOCK/CLOEXEC
        (_AND_K, 0, 0, 0xF),
        (_JEQ_K, 0, deny, socket.SOCK_STREAM),
        (_LD_W_ABS, 0, 0, 32),  # args[2]: the protocol
        (_JEQ_K, allow, 0, 0),
        (_JEQ_K, allow, deny, socket.IPPROTO_TCP),
        ("allow", _RET_K, 0, 0, _ALLOW),
        ("deny", _RET_K, 0, 0, _DENY),
    ]
    labels: dict[str, int] = {}
    plain: list[tuple[Any, ...]] = []
    for instruction in program:
        if isinstance(instruction[0], str):
            labels[instruction[0]] = len(plain)
            instruction = instruction[1:]
        plain.append(instruction)

    def jump(target: Any, at: int) -> int:
        if isinstance(target, str):
            return labels[target] - at - 1
        return int(target)

    return [(code, jump(jt, at), jump(jf, at), k) for at, (code, jt, jf, k) in enumerate(plain)]


def install(*, whole_process: bool) -> bool:
    """Install the filter on this thread (and what it starts), or with ``whole_process`` on
    every thread of the process; once per thread. False when it cannot be installed here."""
    global _process_wide
    import threading

    if _process_wide or threading.get_ident() in _installed_threads:
        return True
    if not supported():
        return False
    instructions = _program()
    code = b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in instructions)
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxP", len(instructions), ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    # without CAP_SYS_ADMIN the kernel requires no_new_privs before a filter
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    if whole_process:
        nr_seccomp = _ARCHES[platform.machine()][3]
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
