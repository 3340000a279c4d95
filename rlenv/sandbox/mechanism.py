"""The three isolation mechanisms: which one works here, and how each one is invoked.

``bwrap`` (bubblewrap) builds a new root from read-only binds; ``unshare`` enters fresh
namespaces and lets the wrapper cover what must not be seen; ``rlimits`` is resource limits
only. See the package docstring for what each one guarantees.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rlenv.sandbox.faketime import SITE_DIR_INSIDE
from rlenv.sandbox.limits import (
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    is_root,
    python_prefix,
    sandbox_python,
)

WEAK_SANDBOX_VARIABLE = "RLENV_ALLOW_WEAK_SANDBOX"
"""Set to 1 to let code verifiers run with resource limits only (no namespace sandbox)."""

WRAPPER = Path(__file__).with_name("wrapper.py")
"""The in-sandbox wrapper, run by path (standard library only)."""
WRAPPER_INSIDE = "/.rlenv-wrapper.py"
"""Where a bwrap sandbox sees a copy of ``WRAPPER`` (unshare runs it from a memfd)."""
PYTHON_INSIDE = "/.rlenv-python"
"""A link to the interpreter in a bwrap sandbox, so the command line names no host path."""

_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/localtime",
)
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_UNSHARE_VISIBLE = frozenset(
    {
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32",
        "/etc",
        "/proc",
        "/dev",
        "/sys",
    }
)
"""What an unshare sandbox leaves in view at the top of the file system (as bwrap shows /usr,
the system links and /etc files); every other top-level directory is covered, and the
interpreter and the workdir are bound back inside."""
_UNSHARE_FLAGS = ("--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc")


# --------------------------------------------------------------------------- discovery
# (probing runs a command through a mechanism: `probe_mechanism` lives in rlenv.sandbox.run)


FORCE_VARIABLE = "RLENV_SANDBOX"
"""Set to a mechanism name to use that one instead of the best that works (tests, and comparing
mechanisms); "rlimits" still needs --allow-weak-sandbox for code verifiers."""


def forced_mechanism() -> str | None:
    """The mechanism RLENV_SANDBOX names, None when unset; UserError (exit 2) for any other
    value: a typo must not silently become the best mechanism that works."""
    forced = os.environ.get(FORCE_VARIABLE, "")
    if not forced or forced in ("bwrap", "unshare", "rlimits"):
        return forced or None
    from rlenv.errors import UserError

    raise UserError(f"{FORCE_VARIABLE}={forced[:40]!r}: choose bwrap, unshare or rlimits")


# --------------------------------------------------------------------------- paths


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def closed_parents(path: str) -> str | None:
    """The outermost ancestor of ``path`` that others cannot search, or None."""
    for parent in reversed(Path(path).parents):
        with contextlib.suppress(OSError):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return str(parent)
    return None


def _top_level() -> tuple[list[str], list[str]]:
    """The root's directories and regular files an unshare sandbox must not show: all but the
    system ones (the project, home directories, caches, /work, /opt, /srv, /var, /run...)."""
    dirs, files = [], []
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        path = "/" + entry.name
        if path in _UNSHARE_VISIBLE or entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False):
            dirs.append(path)
        elif entry.is_file(follow_symlinks=False):
            files.append(path)
    return dirs, files


def cover_list(workdir: Path, root: bool) -> list[str]:
    """Dirs an unshare sandbox replaces by an empty read-only tmpfs: every top-level directory
    but the system ones (so the project, caches and home directories are out of sight, as under
    bwrap), the usual world-writable ones and, as root, the closed parents of the interpreter
    and the workdir. What the program needs under them is bound back (``keep``)."""
    candidates = [d for d in _WORLD_WRITABLE if not within(Path(d), workdir)]
    candidates += [d for d in _top_level()[0] if not within(Path(d), workdir)]
    if root:
        for path in (python_prefix(), str(workdir)):
            closed = closed_parents(path)
            if closed is not None:
                candidates.append(closed)
    outermost = [
        c for c in candidates if not any(o != c and within(Path(c), Path(o)) for o in candidates)
    ]
    return list(dict.fromkeys(outermost))


def hide_list(hidden: list[Path], *, top_level: bool = False) -> list[tuple[str, str]]:
    """(path, "dir"|"file") to hide; with `top_level`, also the regular files at the root."""
    listed = [(str(p), "dir" if p.is_dir() else "file") for p in hidden]
    if top_level:
        listed += [(path, "file") for path in _top_level()[1]]
    return listed


@functools.cache
def own_budget_works() -> bool:
    """As root: whether root may make a user namespace here, which gives each sandbox a
    process budget of its own (``wrapper.own_budget``); probed once per process."""
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"
    try:
        done = subprocess.run(
            [sandbox_python(), "-I", "-S", "-c", probe],
            capture_output=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def mechanism_notes(mechanism: str, root: bool) -> list[str]:
    """What ``mechanism`` does not guarantee here (recorded in ``SandboxResult.notes``)."""
    notes = []
    if root and not own_budget_works():
        notes.append(
            "max_processes shared with every other sandbox running here (root cannot make a "
            "user namespace)"
        )
    if mechanism == "rlimits":
        notes.append("no network isolation; hidden paths not hidden (rlimits mechanism)")
        if root and closed_parents(python_prefix()):
            notes.append(f"the interpreter under {python_prefix()} is closed to the sandbox uid")
        notes.append("disk limit per file only: the program writes the host workdir in place")
        if not root:
            notes.append("RLIMIT_NPROC not applied and kill(-1) not prevented (not root)")
            notes.append("memory limit per process only (no process limit to share it)")
    if mechanism == "unshare":
        notes.append(
            "/usr, /etc and /sys of the host visible (read-only for the sandbox uid only as root)"
        )
    return notes


# --------------------------------------------------------------------------- command lines


def _outer_netns() -> bool:
    """As root, bwrap starts inside a network namespace `unshare --net` made (loopback down)
    instead of making its own: bwrap's loopback setup asks glibc for a datagram socket, which
    the frozen world's socket filter (`rlenv.world.sockets`) refuses."""
    return is_root() and shutil.which("unshare") is not None


def _bwrap_system(root: bool) -> tuple[list[str], list[Path]]:
    """Namespaces, identity and the read-only system binds; (args, read-only paths)."""
    args = [
        "--unshare-pid",
        *([] if root and _outer_netns() else ["--unshare-net"]),
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
    ]
    if root:
        # Privileged bwrap: no user namespace, so the wrapper can become a real unprivileged
        # host uid; it keeps only the caps it needs for that and loses them at setuid.
        # CAP_CHOWN hands the filled workdir to that uid.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        args += ["--cap-add", "CAP_CHOWN"]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    ro_paths: list[Path] = [Path("/usr")]
    args += ["--ro-bind", "/usr", "/usr"]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
            ro_paths.append(Path(link))
    # Privileged bwrap would make /etc 0700 for its binds: the program could not read
    # /etc/passwd (no name for its uid), ld.so.cache or hosts.
    args += ["--perms", "0755", "--dir", "/etc"]
    for etc in _ETC_FILES:
        if os.path.lexists(etc):
            args += ["--ro-bind", etc, etc]
            ro_paths.append(Path(etc))
    prefix = Path(python_prefix())
    if not any(within(prefix, p) for p in ro_paths):
        # Privileged bwrap makes missing parents 0700, closed to the sandbox uid.
        for parent in reversed(prefix.parents):
            if parent != Path("/"):
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(prefix), str(prefix)]
        ro_paths.append(prefix)
    return args, ro_paths


def bwrap_args(
    workdir: Path, hidden: list[Path], site_dir: str | None, disk_bytes: int, wrapper_fd: int
) -> list[str]:
    """bwrap's options: the new root, an empty tmpfs of ``disk_bytes`` at ``SANDBOX_WORKDIR``
    (the wrapper fills it from the seed archive), hidden paths masked. Nothing in it names a
    host path: the wrapper is copied in from ``wrapper_fd`` and the interpreter is reached
    through the ``PYTHON_INSIDE`` link."""
    args, ro_paths = _bwrap_system(is_root())
    args += ["--ro-bind-data", str(wrapper_fd), WRAPPER_INSIDE]
    args += ["--symlink", sandbox_python(), PYTHON_INSIDE]
    if site_dir is not None:
        args += ["--ro-bind", site_dir, SITE_DIR_INSIDE]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "0755", "--size", str(disk_bytes), "--tmpfs", SANDBOX_WORKDIR]
    for path in hidden:
        if within(path, workdir):
            continue  # left out of the seed archive: never in the sandbox
        if not any(within(path, p) for p in ro_paths):
            continue  # not mounted in the sandbox at all
        inside = str(path)
        if path.is_dir():
            args += ["--perms", "0555", "--tmpfs", inside, "--remount-ro", inside]
        else:
            args += ["--ro-bind", "/dev/null", inside]
    args += ["--remount-ro", "/"]
    return args


@dataclass
class Launch:
    """The host command line of one run and the descriptors it is handed."""

    command: list[str]
    pass_fds: tuple[int, ...] = ()
    owned: list[int] = field(default_factory=list)
    """memfds made for this run (bwrap's --args, the wrapper, its spec, the seed archive)."""
    info_read: int | None = None
    """bwrap writes the host pid of the namespace's init here (--info-fd)."""
    info_write: int | None = None

    def close_info_write(self) -> None:
        if self.info_write is not None:
            os.close(self.info_write)
            self.info_write = None

    def close(self) -> None:
        for fd in (*self.owned, self.info_read, self.info_write):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.owned = []
        self.info_read = self.info_write = None


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def launch(
    mechanism: str,
    wrapper_spec: dict[str, object],
    workdir: Path,
    hidden: list[Path],
    site_dir: str | None,
    *,
    seed_fd: int | None = None,
    disk_bytes: int = 0,
) -> Launch:
    """The command that runs the wrapper (then the program) under ``mechanism``.

    The wrapper reads its spec from a memfd whose number is its only argument, so neither
    the spec nor the workdir's host path shows in any command line; ``seed_fd`` (an archive
    of the workdir) is handed down to it the same way."""
    spec_fd = memfd("rlenv-sandbox-spec", json.dumps(wrapper_spec).encode())
    owned = [spec_fd]
    fds = [spec_fd] + ([seed_fd] if seed_fd is not None else [])
    if mechanism == "bwrap":
        wrapper_fd = memfd("rlenv-sandbox-wrapper", WRAPPER.read_bytes())
        launcher = [PYTHON_INSIDE, "-I", "-S", WRAPPER_INSIDE, str(spec_fd)]
        # bwrap reports the host pid of the namespace's init on --info-fd: bwrap itself may
        # exit as soon as the program does, while the init is still tearing the namespace
        # down, so the init is what we wait for.
        info_read, info_write = os.pipe()
        options = [
            "--info-fd",
            str(info_write),
            *bwrap_args(workdir, hidden, site_dir, disk_bytes, wrapper_fd),
        ]
        # Options go through a memfd (--args) so they do not show in /proc/1/cmdline; the
        # command itself must follow on the real command line (bwrap reads only options
        # from --args).
        args_fd = memfd("bwrap-args", b"\0".join(a.encode() for a in options) + b"\0")
        outer = ["unshare", "--net"] if _outer_netns() else []
        return Launch(
            [*outer, "bwrap", "--args", str(args_fd), "--", *launcher],
            pass_fds=(args_fd, info_write, wrapper_fd, *fds),
            owned=[*owned, args_fd, wrapper_fd],
            info_read=info_read,
            info_write=info_write,
        )
    if mechanism == "unshare":
        wrapper_fd = memfd("rlenv-sandbox-wrapper", WRAPPER.read_bytes())
        owned.append(wrapper_fd)
        launcher = [sandbox_python(), "-I", "-S", f"/proc/self/fd/{wrapper_fd}", str(spec_fd)]
        command = ["unshare"]
        if not is_root():
            command.append("--map-root-user")
        command += [*_UNSHARE_FLAGS, "--uts", "--ipc", "--", *launcher]
        return Launch(command, pass_fds=(wrapper_fd, *fds), owned=owned)
    launcher = [sandbox_python(), "-I", "-S", str(WRAPPER), str(spec_fd)]
    return Launch(launcher, pass_fds=tuple(fds), owned=owned)
