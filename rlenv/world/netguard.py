"""Refuse every outbound connection from the frozen world except explicitly allowed endpoints.

Three layers: a worker started in fresh network and pid namespaces (`netns_prefix`) has no
route out at all and sees no process but its own; the kernel filter of `rlenv.world.sockets`
lets it open only TCP, netlink and socket pairs (no AF_UNIX, UDP or raw sockets, whatever
code calls); and `install` patches the socket module in the worker so what is refused says why.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from typing import Any

_allowed: set[tuple[str, int]] = set()
_installed = False
_NETNS_PREFIX: list[str] | None = None


def netns_prefix() -> list[str]:
    """The command prefix that starts a worker in fresh network and pid namespaces (with its
    own /proc), or only a network namespace, or [] if none works.

    A worker in its own network namespace has no route out at all, so even a subprocess a tool
    starts cannot reach the network; the in-process guard then only adds a clearer message. In
    its own pid namespace it cannot see (or read the environment of) the orchestrator, the
    shell that started it or any other process. `setpriv --pdeathsig` and `--kill-child` keep
    the rule that a worker dies with the orchestrator (its parent is then outside its view).
    """
    global _NETNS_PREFIX
    if _NETNS_PREFIX is None:
        _NETNS_PREFIX = []
        if shutil.which("unshare") and os.environ.get("RLENV_NO_NETNS") != "1":
            pid = ["--pid", "--fork", "--kill-child", "--mount-proc"]
            candidates = [
                ["unshare", "--net", "--ipc"],
                ["unshare", "--net", "--ipc", "--map-root-user"],
            ]
            if shutil.which("setpriv"):
                guard = ["setpriv", "--pdeathsig", "KILL"]
                candidates = [
                    [*guard, "unshare", "--net", "--ipc", *pid],
                    [*guard, "unshare", "--net", "--ipc", "--map-root-user", *pid],
                    *candidates,
                ]
            for prefix in candidates:
                try:
                    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if probe.returncode == 0:
                    _NETNS_PREFIX = prefix
                    break
    return list(_NETNS_PREFIX)


def process_view_mode(live_tools: bool) -> str:
    """What processes a local worker sees: "own pid namespace" or "host"."""
    return "own pid namespace" if not live_tools and "--pid" in netns_prefix() else "host"


def network_guard_mode(live_tools: bool) -> str:
    """How a local worker's network is refused: "netns+python", "python" or off (recording)."""
    if live_tools:
        return "off (recording)"
    return "netns+python" if netns_prefix() else "python"


class NetworkRefused(ConnectionRefusedError):
    """Raised when code inside the frozen world tries to reach the network."""


def _address_allowed(address: Any) -> bool:
    if not isinstance(address, tuple) or len(address) < 2:
        return True  # AF_UNIX paths and the like: local IPC, not network
    host, port = str(address[0]), int(address[1])
    return (host, port) in _allowed


def install(allowed: list[tuple[str, int]] | None = None) -> None:
    """Patch socket connect/connect_ex/getaddrinfo process-wide (idempotent)."""
    global _installed
    for host, port in allowed or []:
        _allowed.add((host, int(port)))
        try:
            for info in _real_getaddrinfo(host, port):
                _allowed.add((str(info[4][0]), int(port)))
        except OSError:
            pass
    if _installed:
        return
    _installed = True

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _address_allowed(address):
            raise NetworkRefused(
                f"rlenv frozen world: outbound connection to {address[0]}:{address[1]} refused"
                " (only replayed fixtures and the model endpoint are reachable)"
            )
        return _real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _address_allowed(address):
            raise NetworkRefused(
                f"rlenv frozen world: outbound connection to {address[0]}:{address[1]} refused"
            )
        return _real_connect_ex(self, address)

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        allowed_hosts = {allowed_host for allowed_host, _ in _allowed}
        if host is not None and str(host) not in allowed_hosts and not _is_numeric(str(host)):
            raise NetworkRefused(
                f"rlenv frozen world: name lookup for {host} refused (no live network in replay)"
            )
        return _real_getaddrinfo(host, port, *args, **kwargs)

    def init(self: socket.socket, family: Any = -1, type: Any = -1, *args: Any, **kw: Any) -> None:
        fileno = args[1] if len(args) > 1 else kw.get("fileno")
        if fileno is None:
            refused = _refused_kind(int(family), int(type))
            if refused:
                raise NetworkRefused(
                    f"rlenv frozen world: {refused} sockets refused (only TCP to the model"
                    " endpoint and socket.socketpair are allowed)"
                )
        _real_init(self, family, type, *args, **kw)

    socket.socket.__init__ = init  # type: ignore[method-assign]
    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _refused_kind(family: int, kind: int) -> str | None:
    """What the kernel filter would refuse, named (-1: Python's default, AF_INET stream)."""
    if family == -1:
        family = socket.AF_INET
    if kind == -1:
        kind = socket.SOCK_STREAM
    if family == socket.AF_UNIX:
        return "AF_UNIX"
    if family in (socket.AF_INET, socket.AF_INET6):
        base = kind & 0xF
        return None if base == socket.SOCK_STREAM else "UDP" if base == socket.SOCK_DGRAM else "raw"
    if family == getattr(socket, "AF_NETLINK", None):
        return None
    return f"address family {family}"


def _is_numeric(host: str) -> bool:
    """A literal address needs no lookup; the connect guard decides about it."""
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


_real_init = socket.socket.__init__
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo
