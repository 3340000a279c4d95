"""The spec's services: started for a recording under the frozen clock, reached by logical URL.

`rlenv record` starts each service of the spec's `services:` block itself (its own process
group, libfaketime at the spec's instant, a free loopback port), waits until it is ready, and
kills the group afterwards, also on errors. Tools always see the logical base URL
(`http://NAME.rlenv.internal`); while recording, the worker resolves that host name to the
service's real address (`route_logical_hosts`), so the request a cassette stores never holds a
port, and replay needs neither the service nor a host variable.
"""

from __future__ import annotations

import contextlib
import ctypes
import email.utils
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.errors import RunFailed

if TYPE_CHECKING:
    from rlenv.spec import Service

STOP_GRACE_SECONDS = 5.0
_POLL_SECONDS = 0.05


def service_variables(services: list[Service]) -> dict[str, str]:
    """Each service's logical base URL under its variable (RLENV_<NAME>_URL)."""
    return {service.variable: service.base_url for service in services}


def service_urls(services: list[Service]) -> dict[str, str]:
    """Service name -> logical base URL (what a tool finds in `ctx.services`)."""
    return {service.name: service.base_url for service in services}


# -- inside a recording worker: logical host -> real address ---------------------------------

_routes: dict[str, tuple[str, int]] = {}
_real_getaddrinfo = socket.getaddrinfo


def route_logical_hosts(routes: dict[str, str]) -> None:
    """Resolve each logical host (`search.rlenv.internal`) to its service's real `HOST:PORT`
    in this process, whatever port the URL names; every other name resolves as before.
    Client-agnostic (httpx, requests, urllib, aiohttp all resolve through getaddrinfo)."""
    for host, address in routes.items():
        real_host, _, port = address.rpartition(":")
        _routes[host.lower()] = (real_host, int(port))
    if socket.getaddrinfo is not _getaddrinfo:
        socket.getaddrinfo = _getaddrinfo
    names = [name for name in os.environ.get("NO_PROXY", "").split(",") if name]
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join([*names, ".rlenv.internal"])


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    route = _routes.get(str(host).lower()) if host is not None else None
    if route is None:
        return _real_getaddrinfo(host, port, *args, **kwargs)
    return _real_getaddrinfo(route[0], route[1], *args, **kwargs)


# -- in `rlenv record`: start, check, stop ---------------------------------------------------


@dataclass
class RunningService:
    service: Service
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the service's child process: SIGTERM when `rlenv record` dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _start(service: Service, root: Path, clock: dict[str, str], logs: Path) -> RunningService:
    port = _free_port()
    command = [part.replace("{port}", str(port)) for part in service.command]
    interpreter_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        **service.env,
        "PORT": str(port),
        "PATH": interpreter_bin + os.pathsep + os.environ.get("PATH", ""),
    }
    variables = dict(clock)
    if variables.get("PYTHONPATH") and env.get("PYTHONPATH"):
        variables["PYTHONPATH"] += os.pathsep + env["PYTHONPATH"]
    env.update(variables)
    log = logs / f"{service.name}.log"
    with open(log, "wb") as output:
        try:
            process = subprocess.Popen(
                command,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            message = f"service {service.name!r}: cannot start {command[0]!r}: {exc}"
            raise RunFailed(message) from None
    return RunningService(service, process, port, log)


def _is_ready(running: RunningService) -> bool:
    ready = running.service.ready
    if ready.http is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            return probe.connect_ex(("127.0.0.1", running.port)) == 0
    import httpx

    try:
        response = httpx.get(f"http://{running.address}{ready.http}", timeout=2.0, trust_env=False)
    except httpx.HTTPError:
        return False
    return 200 <= response.status_code < 300


def _wait_ready(running: RunningService) -> None:
    ready = running.service.ready
    deadline = time.monotonic() + ready.timeout_s
    probe = f"GET {ready.http}" if ready.http else "TCP connect"
    while True:
        if running.process.poll() is not None:
            tail = running.log_tail()
            raise RunFailed(
                f"service {running.service.name!r} exited with code {running.process.returncode}"
                f" before it was ready{': ' + tail if tail else ''}"
            )
        if _is_ready(running):
            return
        if time.monotonic() >= deadline:
            raise RunFailed(
                f"service {running.service.name!r} not ready after {ready.timeout_s:g} s"
                f" ({probe} on port {running.port})"
            )
        time.sleep(_POLL_SECONDS)


def stop(running: RunningService) -> None:
    """Kill the service's whole process group: SIGTERM, then SIGKILL after a grace period."""
    try:
        group = os.getpgid(running.process.pid)
    except ProcessLookupError:
        group = running.process.pid
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, STOP_GRACE_SECONDS)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
        try:
            running.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(group):
            return
    running.process.wait()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@contextlib.contextmanager
def started_services(
    services: list[Service], root: Path, clock: dict[str, str]
) -> Iterator[dict[str, str]]:
    """Start every service (in `root`, with the libfaketime variables `clock`), wait until each
    is ready, yield logical host -> real `HOST:PORT`; every started group is killed on exit."""
    running: list[RunningService] = []
    with tempfile.TemporaryDirectory(prefix="rlenv-services-") as logs:
        try:
            for service in services:
                running.append(_start(service, root, clock, Path(logs)))
                _wait_ready(running[-1])
            yield {item.service.host: item.address for item in running}
        finally:
            for item in reversed(running):
                stop(item)


# -- after a recording: responses that carry the real date -----------------------------------

_ISO_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2})")


@dataclass
class DateFinding:
    tool: str
    interaction: int
    what: str


def _header(headers: dict[str, Any], name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) and value else value)
    return None


def _text(body: Any) -> str:
    value = (body or {}).get("string") if isinstance(body, dict) else body
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else ""


def dated_responses(
    tool: str,
    responses: list[dict[str, Any]],
    frozen: datetime,
    today: date,
    *,
    first: int = 0,
) -> list[DateFinding]:
    """Responses (numbered from `first`) whose `Date:` header is not the frozen day, or whose
    body holds the real today (as YYYY-MM-DD) while the world's day is another one."""
    frozen_day = frozen.date()
    findings: list[DateFinding] = []
    for number, response in enumerate(responses, start=first):
        header = _header(response.get("headers") or {}, "date")
        if header:
            try:
                stamped = email.utils.parsedate_to_datetime(header)
            except (TypeError, ValueError):
                stamped = None
            if stamped is not None and stamped.date() != frozen_day:
                findings.append(DateFinding(tool, number, f"Date header {header!r}"))
                continue
        if today != frozen_day and today.isoformat() in _ISO_DAY.findall(
            _text(response.get("body"))
        ):
            findings.append(DateFinding(tool, number, f"body date {today.isoformat()!r}"))
    return findings


def date_warning(findings: list[DateFinding], frozen: datetime) -> str | None:
    """One line for `rlenv record` (non-fatal), or None."""
    if not findings:
        return None
    first = findings[0]
    count = len(findings)
    return (
        f"warning: {count} recorded response{'s' if count != 1 else ''} carr"
        f"{'y' if count != 1 else 'ies'} a date other than the frozen {frozen.date().isoformat()}"
        f" (first: tool {first.tool!r} interaction {first.interaction}, {first.what});"
        " start the service from the spec's services: block so it runs under the frozen clock"
    )
