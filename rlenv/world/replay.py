"""Tool HTTP replay from vcrpy cassettes, looked up through an index built once per cassette.

vcrpy scans every interaction per request and re-parses bodies at each comparison; here each
cassette is indexed by a canonical request key (method, normalised URL, canonical body) when it
loads, so a lookup is one dict access. The cassette format and vcrpy's patching stay; a miss
never goes live: it is an error, or the tool's declared fallback, and it is counted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import pickle
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rlenv.canonical import canonical_bytes, sha256_file, sha256_json
from rlenv.errors import FixtureMiss, SpecError
from rlenv.files import atomic_write, default_cache_dir
from rlenv.spec_data import USER_CASSETTE
from rlenv.world.packed import PackedResponses
from rlenv.world.replay_patch import import_vcr, late_patches, skipped_patchers
from rlenv.world.scrub import Scrubber

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec

_DEFAULT_PORTS = {"http": 80, "https": 443}


@functools.lru_cache(maxsize=4096)  # a pure function; a tool's URLs repeat across calls
def normalise_url(uri: str) -> str:
    """Lower-case scheme and host, drop default ports, sort query parameters."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


_MULTIPART_START = re.compile(rb"^--([^\r\n]{1,200})\r?\n")


def canonical_body(body: bytes | str | None) -> bytes:
    """JSON bodies compare by content (key order, spacing ignored); form bodies by sorted pairs."""
    if body is None:
        return b""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    if not raw:
        return b""
    try:
        return b"json:" + canonical_bytes(json.loads(raw))
    except (ValueError, TypeError):
        pass
    multipart = _MULTIPART_START.match(raw)
    if multipart:  # the boundary is random per request: compare the parts
        boundary = multipart.group(1)
        parts = [part.strip(b"\r\n") for part in raw.split(b"--" + boundary)]
        cleaned = [part.decode("utf-8", "replace") for part in parts if part not in (b"", b"--")]
        return b"multipart:" + canonical_bytes(cleaned)
    text = raw.decode("utf-8", "replace")
    if "=" in text and " " not in text and "\n" not in text:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False)
        if pairs:
            return b"form:" + urlencode(sorted(pairs)).encode()
    return b"raw:" + raw


def request_key(method: str, uri: str, body: bytes | str | None) -> str:
    digest = hashlib.sha256()
    digest.update(method.upper().encode())
    digest.update(b"\n")
    digest.update(normalise_url(uri).encode())
    digest.update(b"\n")
    digest.update(canonical_body(body))
    return digest.hexdigest()


def _serializer_for(path: Path) -> Any:
    import_vcr()
    from vcr.serializers import jsonserializer

    from rlenv.world import cassette_yaml  # vcrpy's YAML reading, an interaction at a time

    return jsonserializer if path.suffix == ".json" else cassette_yaml


def load_interactions(path: Path) -> list[tuple[Any, dict[str, Any]]]:
    """Read a vcrpy cassette file as (vcr Request, response dict) pairs."""
    import_vcr()
    from vcr.persisters.filesystem import FilesystemPersister

    with contextlib.suppress(OSError):
        if not path.read_bytes().strip():  # vcrpy's "CassetteNotFoundError: " (no text)
            raise SpecError(
                "cassette cannot be read: the file is empty (no recorded interactions); write"
                " it with `rlenv record`",
                where=str(path),
            )
    try:
        loaded = FilesystemPersister.load_cassette(str(path), serializer=_serializer_for(path))
    except Exception as exc:  # vcrpy raises several kinds for unreadable files
        text = " ".join(str(exc).split())
        text = text if len(text) <= 300 else text[:297] + "..."
        message = f"cassette cannot be read: {type(exc).__name__}: {text}"
        raise SpecError(message, where=str(path)) from None
    requests, responses = loaded[0], loaded[1]
    interactions = list(zip(requests, responses, strict=False))
    for number, (request, response) in enumerate(interactions):
        problem = _interaction_problem(request, response)
        if problem:
            raise SpecError(f"interaction {number}: {problem}", where=str(path))
    return interactions


def _interaction_problem(request: Any, response: Any) -> str | None:
    """What makes a recorded interaction unplayable (replay would crash or invent a status):
    a request without a text method and URL or with a body that is not text, a response
    without a numeric HTTP status, headers or a text body."""
    if not isinstance(request.method, str) or not isinstance(request.uri, str):
        return "request needs a 'method' and a 'uri' string"
    if request.body is not None and not isinstance(request.body, bytes | str):
        return f"request.body is a {type(request.body).__name__}; expected a string or null"
    if not isinstance(response, dict):
        return f"response is a {type(response).__name__}; expected a mapping"
    status = response.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
        return f"response.status.code is {code!r}; expected an HTTP status 100-599"
    headers = response.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(value, str | list) for value in headers.values()
    ):
        return "response.headers must map names to a string or a list of strings"
    body = response.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("string"), bytes | str):
        return "response.body needs a 'string' (the recorded body text)"
    return None


def _index_cache_path(cassette_sha: str, scrubber: Scrubber) -> Path:
    config = sha256_json(
        {
            "names": scrubber.names.pattern,
            "headers": sorted(scrubber.headers),
            "extra": sorted(scrubber.extra),
            # 3: each response pickled on its own (`ToolIndex.response`); 4: packed together
            "format": 4,
        }
    )
    return default_cache_dir() / "cassette-index" / f"{cassette_sha}-{config[:16]}.pickle"


def load_index(
    path: Path, scrubber: Scrubber, *, aside: bool = False
) -> tuple[Mapping[str, bytes], list[str]]:
    """A cassette's request-key index (each response pickled: `ToolIndex.response`) and its
    secret findings, cached by the file's hash.

    Parsing a YAML cassette is slow (seconds for 10 000 interactions), so the index is built
    once per cassette version and loaded from the cache by every worker and later run. A
    response is kept as one bytes object and unpacked when it is served: as vcrpy's nested
    dicts, 10 000 of them took 16 MB of every worker (and a served response can no longer be
    changed in place for the next request that gets it); the responses are held together, in
    three objects (`rlenv.world.packed`).

    With `aside` (the orchestrator's env check), an index not in the cache is built by a
    short-lived interpreter of its own (`rlenv.world.index_child`), so vcrpy, detect-secrets
    and the parse's garbage never enter this process; in this process when none can be had.
    """
    cache = _index_cache_path(sha256_file(path), scrubber)
    cached = _cached_index(cache)
    if cached is not None:
        return cached
    if aside:
        from rlenv.world.index_child import index_aside

        built = index_aside(path, scrubber, cache)
        if built is not None:
            return built
    return _built(path, scrubber, cache)[0]


def _cached_index(cache: Path) -> tuple[Mapping[str, bytes], list[str]] | None:
    """The index `store_index` wrote to `cache`, or None (not there, torn, an older format)."""
    try:
        with open(cache, "rb") as handle:
            cached: tuple[Mapping[str, bytes], list[str]] = pickle.load(handle)
        if isinstance(cached[0], PackedResponses):
            return cached
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError):
        pass
    return None


def build_index(path: Path, scrubber: Scrubber) -> tuple[PackedResponses, list[str]]:
    """Parse the cassette and key its interactions (first response wins; two responses for
    one scrubbed request are refused), and find the secrets it holds."""
    from rlenv.world.scrub import find_secrets

    interactions = load_interactions(path)
    index = ToolIndex("", None, scrubber)
    responses: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}
    for number, (request, response) in enumerate(interactions):
        key = index.key_for(request)
        if key in responses and responses[key] != response:
            raise SpecError(
                f"interactions {first[key]} and {number} differ only in scrubbed (secret-named)"
                " fields but have different responses: replay could not tell them apart;"
                " rename the field or re-record",
                where=str(path),
            )
        first.setdefault(key, number)
        responses.setdefault(key, response)
    findings = find_secrets(interactions, scrubber)
    packed = PackedResponses(
        {
            key: pickle.dumps(response, protocol=pickle.HIGHEST_PROTOCOL)
            for key, response in responses.items()
        }
    )
    return packed, findings


def _built(
    path: Path, scrubber: Scrubber, cache: Path
) -> tuple[tuple[PackedResponses, list[str]], bytes]:
    """The index built (`build_index`) and stored in the cache: it, and the bytes stored."""
    built = build_index(path, scrubber)
    payload = pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL)
    store_index(cache, payload)
    return built, payload


def store_index(cache: Path, payload: bytes) -> None:
    """Write an index's pickle to the cache, whole or not at all."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(cache, payload)
    except OSError:
        pass  # a read-only cache only costs speed


def serve_index() -> None:  # pragma: no cover - runs in the child (tests check its answers)
    """The body of the child `load_index` builds a cold index in (`rlenv.world.index_child`):
    the index built and stored as in this process, the stored bytes its answer."""
    from rlenv.world.index_child import serve

    serve(lambda path, scrubber, cache: _built(path, scrubber, cache)[1])


@dataclass
class ToolIndex:
    """One tool's cassette, indexed by request key; first recorded response wins on repeats."""

    name: str
    path: Path | None
    scrubber: Scrubber
    fallback: dict[str, Any] | None = None
    # request key -> packed response (`PackedResponses` once loaded)
    responses: Mapping[str, bytes] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def load(self) -> ToolIndex:
        if self.path is None:
            return self
        self.responses, self.findings = load_index(self.path, self.scrubber)
        return self

    def response(self, key: str) -> dict[str, Any] | None:
        """The recorded response for a request key (a fresh copy each time), or None; packed
        by `load_index` (pickled by rlenv itself, into rlenv's cache)."""
        packed = self.responses.get(key)
        return None if packed is None else pickle.loads(packed)  # type: ignore[no-any-return]

    def key_for(self, request: Any) -> str:
        return request_key(request.method, *self.scrubbed(request))

    def scrubbed(self, request: Any) -> tuple[str, Any]:
        """The request's URL and body with secrets scrubbed, as the index keys them."""
        content_type = ""
        for name, value in (request.headers or {}).items():
            if name.lower() == "content-type":
                content_type = value[0] if isinstance(value, list) else str(value)
        return self.scrubber.url(request.uri), self.scrubber.body(request.body, content_type)

    def event(self, outcome: str, request: Any) -> FixtureEvent:
        """What a request did, named by its scrubbed URL and the digest of its body."""
        url, body = self.scrubbed(request)
        canonical = canonical_body(body)
        digest = hashlib.sha256(canonical).hexdigest() if canonical else ""
        return FixtureEvent(self.name, outcome, request.method, normalise_url(url), digest)


@dataclass
class FixtureEvent:
    tool: str
    outcome: str  # "hit" | "miss" | "fallback"
    method: str
    url: str  # normalised, secrets scrubbed
    body_sha256: str = ""  # of the canonical scrubbed body, as the index keys it ("" if none)


def _fallback_response(fallback: dict[str, Any]) -> dict[str, Any]:
    body = fallback.get("body")
    text = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
    status = int(fallback.get("status", 200))
    return {
        "status": {"code": status, "message": "OK" if status < 400 else "Fallback"},
        "headers": {
            "content-type": ["application/json" if not isinstance(body, str) else "text/plain"]
        },
        "body": {"string": text.encode()},
    }


def lookup(state: Any, request: Any) -> tuple[str, dict[str, Any] | None]:
    """The outcome ("hit", "fallback" or "miss") and response for `request`, from the index of
    the tool `state.current` names (`state`: the replay cassette class)."""
    index = state.indexes.get(state.current or "")
    if index is None:
        return "miss", None
    response = index.response(index.key_for(request))
    if response is not None:
        return "hit", response
    if index.fallback is not None:
        return "fallback", _fallback_response(index.fallback)
    return "miss", None


def missed(state: Any, request: Any) -> FixtureMiss:
    """Count a miss in `state.events` and return the error that ends the tool's request."""
    index = state.indexes.get(state.current or "")
    if index is None:  # a tool without a cassette: its request has nothing to match
        event = FixtureEvent(
            state.current or "?", "miss", request.method, normalise_url(request.uri)
        )
    else:
        event = index.event("miss", request)
    state.events.append(event)
    return miss_error(state.current, event)


def miss_error(tool: str | None, event: FixtureEvent) -> FixtureMiss:
    """The error of a tool's request that no cassette holds: one message, whether the miss
    ends the request here or, after the tool caught it, its rollout in the worker."""
    return FixtureMiss(
        f"unrecorded request for tool {tool!r}: {event.method} {event.url}"
        + (f" body sha256:{event.body_sha256[:16]}" if event.body_sha256 else "")
        + " (record it with `rlenv record`, or declare an on_miss fallback)"
    )


def served(state: Any, outcome: str, request: Any) -> None:
    # a hit or fallback needs no digest: only a miss is reported
    state.events.append(FixtureEvent(state.current or "?", outcome, request.method, request.uri))


def serve(state: Any, request: Any) -> dict[str, Any]:
    """The recorded (or fallback) response for `request`, counted; a miss raises FixtureMiss."""
    outcome, response = lookup(state, request)
    if response is None:
        raise missed(state, request)
    served(state, outcome, request)
    return response


def make_replay_cassette_class() -> type:
    """Build the vcrpy Cassette subclass lazily so importing this module does not import vcrpy."""
    import_vcr()
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode

    class ReplayCassette(Cassette):  # type: ignore[misc]
        """A never-recording cassette whose lookups go through the current tool's index."""

        indexes: dict[str, ToolIndex] = {}
        current: str | None = None
        events: list[FixtureEvent] = []

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["record_mode"] = RecordMode.NONE
            super().__init__(*args, **kwargs)

        _last: tuple[Any, str, dict[str, Any] | None] | None = None

        def _lookup(self, request: Any) -> tuple[str, dict[str, Any] | None]:
            # vcrpy asks twice per request (can play? then play): key it once
            if self._last is not None and self._last[0] is request:
                return self._last[1], self._last[2]
            outcome, response = lookup(type(self), request)
            self._last = (request, outcome, response)
            return outcome, response

        def can_play_response_for(self, request: Any) -> bool:
            if self._lookup(request)[1] is None:
                raise missed(type(self), request)
            return True

        def play_response(self, request: Any) -> dict[str, Any]:
            outcome, response = self._lookup(request)
            served(type(self), outcome, request)
            assert response is not None
            return response

        def __contains__(self, request: Any) -> bool:
            return self._lookup(request)[1] is not None

        def _save(self, force: bool = False) -> None:  # never writes
            return None

    return ReplayCassette


def spec_indexes(loaded: LoadedSpec, scrubber: Scrubber) -> dict[str, ToolIndex]:
    """Every tool's loaded index (a tool without a cassette gets an empty one)."""
    indexes = {}
    for tool in loaded.spec.tools:
        if tool.mcp is not None:  # its cassette is MCP calls (`rlenv.world.mcp`), not HTTP
            continue
        # dict(), not model_dump: a worker builds no pydantic serializer (nor scans for plugins)
        fallback = None if tool.on_miss == "error" else dict(tool.on_miss)
        indexes[tool.name] = ToolIndex(
            tool.name, loaded.cassette_path(tool), scrubber, fallback
        ).load()
    user = loaded.spec.user
    if user is not None and user.cassette is not None:  # a model user's replies: like a tool's
        path = loaded.resolve(user.cassette.path)
        indexes[USER_CASSETTE] = ToolIndex(USER_CASSETTE, path, scrubber).load()
    scrubber.values.compile()  # every request is scrubbed to be keyed: once, not per child
    return indexes


@contextlib.contextmanager
def replay_cassette(
    indexes: dict[str, ToolIndex], placeholder: Path, *, light: bool = True
) -> Iterator[Any]:
    """A context that replays tool HTTP from `indexes` (vcrpy needs a cassette `placeholder`
    path; nothing is ever written there); it yields the cassette, whose class collects
    `FixtureEvent`s in `events` and is told the calling tool through `current`.

    vcrpy's patches answer every client library it knows; with `light`, httpx's transports and
    requests' adapter are then answered straight from the index (`rlenv.world.replay_http`),
    without vcrpy's per-request stub, through the same lookup, events and misses.

    Only the client libraries already loaded are patched on entry; one imported later is
    patched when its import finishes (`rlenv.world.replay_patch`)."""
    cassette_class: Any = make_replay_cassette_class()
    cassette_class.indexes = indexes
    cassette_class.events = []
    skipped = {"skip_patchers": skipped_patchers()} if skipped_patchers() else {}
    with (
        cassette_class.use(path=str(placeholder), **skipped) as cassette,
        late_patches(cassette),
    ):
        if not light:
            yield cassette
            return
        from rlenv.world.replay_http import light_replay

        with light_replay(cassette_class, serve):
            yield cassette
