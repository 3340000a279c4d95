"""Classic-BPF seccomp programs, assembled here: the refusals every rollout gets.

Channels between rollouts live in the kernel, not in a process: a key added to the user's
keyring, a SysV shared-memory segment, semaphore set or message queue, a POSIX message queue
outlive the process that made them, and a later rollout (the next one in the worker, in the
next `rlenv run`, the next code-verifier sandbox) can read them. The system calls that reach
them are refused with EPERM (`CHANNEL_SYSCALLS`), whatever calls them (Python, ctypes, a C
extension, a child process: the filter is inherited and cannot be removed). The frozen world's
socket filter (`rlenv.world.sockets`) includes the same refusals; the sandbox installs
`channel_filter()` on its own (`rlenv.sandbox.wrapper`).

No library does this for us: libseccomp's Python bindings are not on PyPI (Debian's
python3-seccomp is built for the system interpreter only), and the programs are short.
"""

from __future__ import annotations

import errno
import platform
import struct
from typing import Any

LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
AND_K = 0x54
RET_K = 0x06

ALLOW = 0x7FFF0000
ERRNO = 0x00050000

# audit arch, the first syscall number of a foreign ABI (x32) or None, and the numbers used
ARCHES: dict[str, dict[str, Any]] = {
    "x86_64": {
        "audit": 0xC000003E,
        "foreign": 0x40000000,
        "socket": 41,
        "io_uring_setup": 425,
        "seccomp": 317,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "shmget": 29,
        "shmat": 30,
        "shmctl": 31,
        "shmdt": 67,
        "semget": 64,
        "semop": 65,
        "semctl": 66,
        "semtimedop": 220,
        "msgget": 68,
        "msgsnd": 69,
        "msgrcv": 70,
        "msgctl": 71,
        "mq_open": 240,
        "mq_unlink": 241,
        "mq_timedsend": 242,
        "mq_timedreceive": 243,
        "mq_notify": 244,
        "mq_getsetattr": 245,
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "foreign": None,
        "socket": 198,
        "io_uring_setup": 425,
        "seccomp": 277,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "shmget": 194,
        "shmat": 196,
        "shmctl": 195,
        "shmdt": 197,
        "semget": 190,
        "semop": 193,
        "semctl": 191,
        "semtimedop": 192,
        "msgget": 186,
        "msgsnd": 189,
        "msgrcv": 188,
        "msgctl": 187,
        "mq_open": 180,
        "mq_unlink": 181,
        "mq_timedsend": 182,
        "mq_timedreceive": 183,
        "mq_notify": 184,
        "mq_getsetattr": 185,
    },
}

CHANNEL_SYSCALLS = (
    # the kernel keyring
    "add_key",
    "request_key",
    "keyctl",
    # SysV IPC
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    # POSIX message queues
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
)
"""Refused with EPERM in the frozen world and in the sandbox. POSIX shared memory and named
semaphores are files in /dev/shm, kept apart by the file system instead."""


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ARCHES


def numbers() -> dict[str, Any]:
    """This machine's row of `ARCHES`."""
    return ARCHES[platform.machine()]


def refuse(code: int) -> int:
    """The filter's return value that fails a call with errno ``code``."""
    return ERRNO | code


def channel_checks(deny: str) -> list[tuple[Any, ...]]:
    """Instructions that jump to label ``deny`` when the syscall number already loaded is one
    of `CHANNEL_SYSCALLS`, and fall through otherwise."""
    row = numbers()
    return [(JEQ_K, deny, 0, row[name]) for name in CHANNEL_SYSCALLS]


def assemble(program: list[tuple[Any, ...]]) -> bytes:
    """``struct sock_filter`` array of ``program``: (code, jt, jf, k) tuples, a tuple may
    start with a label, and jt/jf may name a label (resolved to a relative jump)."""
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

    return b"".join(
        struct.pack("=HBBI", code, jump(jt, at), jump(jf, at), k)
        for at, (code, jt, jf, k) in enumerate(plain)
    )


def channel_filter() -> bytes:
    """A whole filter: `CHANNEL_SYSCALLS` refused with EPERM, calls of another ABI (i386
    through int 0x80, x32), which it could not read the same way, with ENOSYS; all else
    allowed. For the code-verifier sandbox."""
    row = numbers()
    program: list[tuple[Any, ...]] = [
        (LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ_K, 0, "foreign", row["audit"]),
        (LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if row["foreign"] is not None:
        program.append((JGE_K, "foreign", 0, row["foreign"]))
    program += channel_checks("deny")
    program += [
        (RET_K, 0, 0, ALLOW),
        ("deny", RET_K, 0, 0, refuse(errno.EPERM)),
        ("foreign", RET_K, 0, 0, refuse(errno.ENOSYS)),
    ]
    return assemble(program)
