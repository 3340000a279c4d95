"""Sandbox for code-executing verifiers: run a model-written program with no network, a
read-only view of the system, one writable directory, resource limits and a frozen clock.

Three mechanisms, best first (``probe_mechanism`` picks by actually running a command):

``bwrap``
    bubblewrap. Fresh mount, pid, net, ipc, uts namespaces; the new root holds read-only
    binds of /usr (and the /bin, /lib... links), a few /etc files and the Python prefix; the
    workdir is bound read-write at ``SANDBOX_WORKDIR``; everything else, including /tmp, /root,
    /home and the repository, is absent. As root, bwrap runs privileged (no user namespace) and
    the in-sandbox wrapper drops to the unprivileged host uid ``SANDBOX_UID`` before exec, which
    is what makes RLIMIT_NPROC bite (the kernel ignores it for host uid 0, including root
    mapped into a user namespace). As a normal user, bwrap uses a user namespace and the limits
    are set inside it, so the process budget counts only the sandbox's own processes.
``unshare``
    util-linux ``unshare``: fresh net, pid, mount, ipc, uts namespaces; hidden paths and the
    world-writable dirs (/tmp, /var/tmp, /dev/shm) are covered by empty read-only mounts; as
    root the wrapper drops to ``SANDBOX_UID``. The rest of the host file system stays visible
    (read-only to the sandbox uid as root; as a normal user, the caller's own files stay
    writable).
``rlimits``
    resource limits, a cleared environment and a new session only (plus the uid drop as root).
    No network isolation, hidden paths are not hidden; recorded in ``SandboxResult.notes``.

As root (all mechanisms), the wrapper then enters a user namespace of the sandbox's own in
which ``SANDBOX_UID`` is the host's (``wrapper.own_budget``): RLIMIT_NPROC counts a (user
namespace, uid) pair, so each sandbox has ``max_processes`` of its own instead of every sandbox
on the machine sharing host nobody's. Where root cannot make a user namespace, the budget is
shared and ``SandboxResult.notes`` says so.

All mechanisms set no_new_privs, clear the environment and start a new session.
The sandboxed process cannot signal the caller: it is in another pid namespace (bwrap,
unshare), and as root it runs under another uid (all mechanisms). In ``rlimits`` mode as a
normal user nothing stops ``kill(-1, 9)``; use it only as a last resort.

Modules: ``limits`` (what a run is given and returns), ``mechanism`` (probing, command lines),
``run`` (``run_sandboxed``), ``process`` (pipes, waiting, ownership), ``faketime`` (the frozen
clock). ``wrapper.py`` and ``harness.py`` run inside the sandbox, by path, under the sandboxed
interpreter; the verifiers that use the sandbox are in ``rlenv.verifiers.code``.
"""

from pathlib import Path

from rlenv.sandbox.faketime import (
    faketime_env,
    faketime_library,
    faketime_site_dir,
    faketime_string,
)
from rlenv.sandbox.limits import (
    MECHANISMS,
    OUTPUT_LIMIT,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    SandboxLimits,
    SandboxResult,
    sandbox_python,
)
from rlenv.sandbox.run import _mechanism_works as _mechanism_works  # for the tests
from rlenv.sandbox.run import probe_mechanism, run_sandboxed

HARNESS = Path(__file__).with_name("harness.py")
"""The in-sandbox half of ``rlenv.verifiers.code.run_python_tests``: copied into the workdir and
run there by path (standard library only); it imports the model's code and answers calls with
plain JSON values. The tests themselves run in the trusted caller."""

__all__ = [
    "HARNESS",
    "MECHANISMS",
    "OUTPUT_LIMIT",
    "SANDBOX_UID",
    "SANDBOX_WORKDIR",
    "SandboxLimits",
    "SandboxResult",
    "faketime_env",
    "faketime_library",
    "faketime_site_dir",
    "faketime_string",
    "probe_mechanism",
    "run_sandboxed",
    "sandbox_python",
]
