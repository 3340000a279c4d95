"""vcrpy's patches for the HTTP client libraries a frozen world has loaded, and for any other
the moment it is imported.

`vcr.patch`, imported with vcrpy, imports every client library it can patch that is installed
(aiohttp, httpx, httpx2, requests, urllib3, tornado, botocore, ...; ~1 s of CPU, most of a
worker's start with a tool) to keep their original methods, and a cassette then patches them
all. Here vcrpy is imported with the libraries not loaded yet refused (`import_vcr`), so it
keeps the originals of the loaded ones only, and a replay cassette skips the patchers of the
others (`skipped_patchers`). A library first imported later (a tool importing it inside its
function) has its originals kept for vcrpy and, while a replay cassette is open, its patches
applied as soon as its import finishes, before any code can use it (`late_patches`). So a
request through any library vcrpy knows is answered from the cassette or is a miss, never a
live call, whether the library was loaded before replay began or not.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

# vcrpy's patcher groups (`vcr.patch.PATCHER_NAMES` but "httplib": the standard library's,
# always patched) -> the top-level package whose loading makes the group needed
GROUPS = {
    "requests": "requests",
    "boto3": "botocore",
    "urllib3": "urllib3",
    "httplib2": "httplib2",
    "tornado": "tornado",
    "aiohttp": "aiohttp",
    "httpx": "httpx",
    "httpx2": "httpx2",
}
# what vcr.patch imports at its own import besides those (kept out too when not loaded)
_ALSO_IMPORTED = ("httpx_curl_cffi", "pyreqwest")


def _capture_urllib3(patch: Any) -> None:
    import urllib3.connection as conn
    import urllib3.connectionpool as cpool

    patch.conn, patch.cpool = conn, cpool
    patch._VerifiedHTTPSConnection = conn.VerifiedHTTPSConnection
    patch._connHTTPConnection = conn.HTTPConnection
    patch._connHTTPSConnection = conn.HTTPSConnection


def _capture_botocore(patch: Any) -> None:
    from botocore.awsrequest import AWSHTTPConnection, AWSHTTPSConnection

    patch._Boto3VerifiedHTTPSConnection = AWSHTTPSConnection
    patch._cpoolBoto3HTTPConnection = AWSHTTPConnection
    patch._cpoolBoto3HTTPSConnection = AWSHTTPSConnection


def _capture_httplib2(patch: Any) -> None:
    import httplib2

    patch._HTTPConnectionWithTimeout = httplib2.HTTPConnectionWithTimeout
    patch._HTTPSConnectionWithTimeout = httplib2.HTTPSConnectionWithTimeout
    patch._SCHEME_TO_CONNECTION = httplib2.SCHEME_TO_CONNECTION


def _capture_tornado_simple(patch: Any) -> None:
    import tornado.simple_httpclient as simple

    patch._SimpleAsyncHTTPClient_fetch_impl = simple.SimpleAsyncHTTPClient.fetch_impl


def _capture_tornado_curl(patch: Any) -> None:
    import tornado.curl_httpclient as curl

    patch._CurlAsyncHTTPClient_fetch_impl = curl.CurlAsyncHTTPClient.fetch_impl


def _capture_aiohttp(patch: Any) -> None:
    import aiohttp.client

    patch._AiohttpClientSessionRequest = aiohttp.client.ClientSession._request


def _httpx_like(prefix: str, library: Any) -> Callable[[Any], None]:
    def capture(patch: Any) -> None:
        setattr(
            patch, f"_{prefix}HttpTransport_handle_request", library.HTTPTransport.handle_request
        )
        setattr(
            patch,
            f"_{prefix}AsyncHttpTransport_handle_async_request",
            library.AsyncHTTPTransport.handle_async_request,
        )
        setattr(
            patch, f"_{prefix}WsgiTransport_handle_request", library.WSGITransport.handle_request
        )
        setattr(
            patch,
            f"_{prefix}AsgiTransport_handle_async_request",
            library.ASGITransport.handle_async_request,
        )
        setattr(
            patch, f"_{prefix}MockTransport_handle_request", library.MockTransport.handle_request
        )
        setattr(
            patch,
            f"_{prefix}MockTransport_handle_async_request",
            library.MockTransport.handle_async_request,
        )

    return capture


def _capture_httpx(patch: Any) -> None:
    import httpx

    _httpx_like("Httpx", httpx)(patch)


def _capture_httpx2(patch: Any) -> None:
    import httpx2

    _httpx_like("Httpx2", httpx2)(patch)


def _capture_curl(patch: Any) -> None:
    import httpx_curl_cffi

    patch._HttpxCurlTransport_handle_request = httpx_curl_cffi.CurlTransport.handle_request
    patch._HttpxAsyncCurlTransport_handle_async_request = (
        httpx_curl_cffi.AsyncCurlTransport.handle_async_request
    )


def _capture_pyreqwest(patch: Any) -> None:
    import pyreqwest.compatibility.httpx as compat

    patch._HttpxSyncPyreqwestTransport_handle_request = compat.SyncHttpxTransport.handle_request
    patch._HttpxPyreqwestTransport_handle_async_request = compat.HttpxTransport.handle_async_request


@dataclass(frozen=True)
class Library:
    """A module vcrpy patches: the group that patches it, how vcr.patch keeps its originals
    (None: it keeps none), and the global that says they are kept."""

    module: str
    group: str
    capture: Callable[[Any], None] | None
    kept: str


# in vcrpy's order (a late `requests` adds nothing: urllib3, which it imports first, is
# patched when its own import finishes, and vcrpy's requests stubs are urllib3's)
LIBRARIES = (
    Library("requests", "requests", None, ""),
    Library("botocore.awsrequest", "boto3", _capture_botocore, "_cpoolBoto3HTTPConnection"),
    Library("urllib3", "urllib3", _capture_urllib3, "_connHTTPConnection"),
    Library("httplib2", "httplib2", _capture_httplib2, "_HTTPConnectionWithTimeout"),
    Library(
        "tornado.simple_httpclient",
        "tornado",
        _capture_tornado_simple,
        "_SimpleAsyncHTTPClient_fetch_impl",
    ),
    Library(
        "tornado.curl_httpclient",
        "tornado",
        _capture_tornado_curl,
        "_CurlAsyncHTTPClient_fetch_impl",
    ),
    Library("aiohttp", "aiohttp", _capture_aiohttp, "_AiohttpClientSessionRequest"),
    Library("httpx", "httpx", _capture_httpx, "_HttpxHttpTransport_handle_request"),
    Library("httpx_curl_cffi", "httpx", _capture_curl, "_HttpxCurlTransport_handle_request"),
    Library(
        "pyreqwest.compatibility.httpx",
        "httpx",
        _capture_pyreqwest,
        "_HttpxSyncPyreqwestTransport_handle_request",
    ),
    Library("httpx2", "httpx2", _capture_httpx2, "_Httpx2HttpTransport_handle_request"),
)


class _NotYet:
    """A meta-path finder that, in the thread importing vcrpy, refuses the client libraries
    not loaded yet: vcr.patch's ``try: import X`` then leaves X alone."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in self.refused and threading.get_ident() == self.thread:
            raise ImportError(f"{name} is not loaded: vcrpy patches it when it is imported")
        return None


_lock = threading.RLock()
_hooked: set[str] = set()


@functools.cache
def _vcr_skips_patchers() -> bool:
    """Whether the installed vcrpy takes `skip_patchers` (9.4.2 does; 8.x did not): without
    it every cassette patches every library, so vcrpy is imported with all of them, as before."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        numbers = re.findall(r"\d+", version("vcrpy"))[:3]
    except PackageNotFoundError:  # pragma: no cover - vcrpy is a dependency
        return False
    return tuple(int(number) for number in numbers) >= (9, 4, 2)


def import_vcr() -> ModuleType:
    """`vcr.patch`, imported (once per process) without the client libraries not loaded yet,
    and their originals kept for it whenever they are loaded later."""
    with _lock:
        patch = sys.modules.get("vcr.patch")
        if patch is None:
            tops = (*GROUPS.values(), *_ALSO_IMPORTED)
            refused = {top for top in tops if top not in sys.modules}
            finder = _NotYet(refused if _vcr_skips_patchers() else set())
            sys.meta_path.insert(0, finder)
            try:
                patch = importlib.import_module("vcr.patch")
            finally:
                sys.meta_path.remove(finder)
        _watch_late_imports()
        return patch


def _watch_late_imports() -> None:
    """Keep each library's originals for vcrpy when it is loaded (now or later) and, while a
    replay cassette is open, patch it at once."""
    from wrapt import register_post_import_hook

    for library in LIBRARIES:
        if library.module not in _hooked:
            _hooked.add(library.module)
            register_post_import_hook(_loaded_hook(library), library.module)


def _loaded_hook(library: Library) -> Callable[[ModuleType], None]:
    def loaded(module: ModuleType) -> None:
        with _lock:
            patch = sys.modules["vcr.patch"]
            if library.capture is not None and not hasattr(patch, library.kept):
                library.capture(patch)
            for replay in list(_open):
                replay.patch(library)

    return loaded


def skipped_patchers() -> tuple[str, ...]:
    """vcrpy's patcher groups of the libraries not loaded (patched at their import instead)."""
    if not _vcr_skips_patchers():
        return ()
    return tuple(group for group, top in GROUPS.items() if top not in sys.modules)


def _owner(target: Any) -> str:
    return target.__name__ if isinstance(target, ModuleType) else str(target.__module__)


@dataclass
class _OpenReplay:
    """An open replay cassette and the patches applied to it after it opened."""

    cassette: Any
    stack: contextlib.ExitStack
    patched: set[str] = field(default_factory=set)

    def patch(self, library: Library) -> None:
        if library.group not in self.skipped or library.module in self.patched:
            return
        if library.module == "requests":  # its connections are urllib3's, patched already
            return
        self.patched.add(library.module)
        from vcr.patch import CassettePatcherBuilder

        built = list(getattr(CassettePatcherBuilder(self.cassette), f"_{library.group}")())
        patchers = [
            item
            for item in built
            if hasattr(item, "getter")
            and (_owner(item.getter()) + ".").startswith(library.module + ".")
        ]
        for patcher in patchers:
            self.stack.enter_context(patcher)
        if patchers:  # urllib3's pools: the connections its stubs made are closed at the end
            for remover in (item for item in built if not hasattr(item, "getter")):
                self.stack.enter_context(remover)

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(self.cassette.skip_patchers)


_open: list[_OpenReplay] = []

# modules that subclass http.client's connection classes when they are imported
_SUBCLASSING = ("urllib3.connection", "httplib2")


class _RealHttpClient:
    """A meta-path finder, in place while a replay cassette is open: a module that subclasses
    http.client's connection classes at its import (urllib3's, httplib2) is imported against
    the real classes, not vcrpy's stubs (whose subclass vcrpy's own stubs then cannot extend:
    an inconsistent MRO); its patches are applied when its import finishes. For the few
    milliseconds of that import http.client's classes are the real ones; the world's network
    guard refuses any connection made meanwhile by another thread."""

    def __init__(self) -> None:
        self.finding = threading.local()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _SUBCLASSING or getattr(self.finding, "active", False):
            return None
        self.finding.active = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding.active = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RealHttpClientLoader(spec.loader)  # type: ignore[assignment]
        return spec


class _RealHttpClientLoader:
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import http.client

        patch = sys.modules["vcr.patch"]
        stubs = (http.client.HTTPConnection, http.client.HTTPSConnection)
        http.client.HTTPConnection = patch._HTTPConnection  # type: ignore[misc]
        http.client.HTTPSConnection = patch._HTTPSConnection  # type: ignore[misc]
        try:
            self.loader.exec_module(module)
        finally:
            http.client.HTTPConnection, http.client.HTTPSConnection = stubs  # type: ignore[misc]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


@contextlib.contextmanager
def late_patches(cassette: Any) -> Iterator[None]:
    """While open, a client library `cassette` skipped is patched when it is imported (for
    every library loaded since the cassette opened: at once)."""
    # held here: a worker never closes its cassette, so this runs as the interpreter shuts
    # down, when sys.meta_path (and maybe this module's globals) are gone
    lock, opened, system = _lock, _open, sys
    with contextlib.ExitStack() as stack:
        replay = _OpenReplay(cassette, stack)
        finder = _RealHttpClient()
        with lock:
            opened.append(replay)
            system.meta_path.insert(0, finder)
            for library in LIBRARIES:  # loaded between the cassette's opening and now
                if library.module in system.modules:
                    replay.patch(library)
        try:
            yield
        finally:
            with lock:
                opened.remove(replay)
                if isinstance(system.meta_path, list) and finder in system.meta_path:
                    system.meta_path.remove(finder)


__all__ = ["import_vcr", "late_patches", "skipped_patchers"]
