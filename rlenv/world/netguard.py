"""Refuse every outbound connection from the frozen world except explicitly allowed endpoints.

Two layers: a worker started in a fresh network namespace (`netns_prefix`) has no route out at
all, and `install` patches the socket module in the worker so what is refused says why.
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
    """The command prefix that starts a process in a fresh network namespace, or [] if none works.

    A worker in its own network namespace has no route out at all, so even a subprocess a tool
    starts cannot reach the network; the in-process guard then only adds a clearer message.
    """
    global _NETNS_PREFIX
    if _NETNS_PREFIX is None:
        _NETNS_PREFIX = []
        if shutil.which("unshare") and os.environ.get("RLENV_NO_NETNS") != "1":
            for prefix in (["unshare", "--net"], ["unshare", "--net", "--map-root-user"]):
                try:
                    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if probe.returncode == 0:
                    _NETNS_PREFIX = prefix
                    break
    return list(_NETNS_PREFIX)


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

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _is_numeric(host: str) -> bool:
    """A literal address needs no lookup; the connect guard decides about it."""
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo
