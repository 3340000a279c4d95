"""A small, deterministic BM25 search API over a JSONL corpus (stdlib only, starts fast).

It stands in for the "live API" of the search environment: ``rlenv record`` talks to it over real
HTTP and stores the responses in a cassette. Same corpus + seed + query -> byte-identical body:
scores are rounded to 6 places and ties are broken by a seeded rank (sha256 of seed and doc id),
never by dict or set order. The service sends no Date header so that two recordings of the same
requests are identical too.

    python envs/search_env/service.py --host 127.0.0.1 --port 0 [--corpus PATH] [--seed N]
                                      [--port-file FILE] [--log]

Endpoints: GET /search?q=...&k=5, POST /search {"query": str, "k": int}, GET /health,
GET /doc/<id>. An ``X-Api-Key`` header or ``api_key`` query parameter is accepted and ignored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import signal
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "search" / "corpus.jsonl"
K1 = 1.5
B = 0.75
DEFAULT_K = 5
MAX_K = 100
SNIPPET_CHARS = 240
MAX_BODY_BYTES = 64 * 1024

# fmt: off
STOPWORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had",
    "has", "have", "how", "in", "into", "is", "it", "its", "of", "on", "or", "the", "this",
    "that", "to", "was", "were", "what", "when", "where", "which", "who", "whom", "why", "with",
])
# fmt: on
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens without stopwords (the same for documents and queries)."""
    return [token for token in _TOKEN.findall(text.lower()) if token not in STOPWORDS]


def load_corpus(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Read a JSONL corpus of {"id", "title", "text"} records; ids must be unique."""
    docs: list[dict[str, str]] = []
    seen: set[str] = set()
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not all(isinstance(record.get(key), str) for key in ("id", "title", "text")):
            raise ValueError(f"{path}:{number}: each document needs string id, title and text")
        if record["id"] in seen:
            raise ValueError(f"{path}:{number}: duplicate document id {record['id']!r}")
        seen.add(record["id"])
        docs.append({"id": record["id"], "title": record["title"], "text": record["text"]})
    if not docs:
        raise ValueError(f"{path}: corpus is empty")
    return docs


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """The start of a document, cut at a word boundary."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


@dataclass(frozen=True)
class Hit:
    doc: dict[str, str]
    score: float


class BM25Index:
    """Okapi BM25 (k1=1.5, b=0.75) over title + text, with seeded tie-breaking."""

    def __init__(self, docs: list[dict[str, str]], seed: int = 0) -> None:
        self.docs = docs
        self.seed = seed
        self.by_id = {doc["id"]: doc for doc in docs}
        lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for index, doc in enumerate(docs):
            tokens = tokenize(f"{doc['title']} {doc['text']}")
            lengths.append(len(tokens))
            for term, count in Counter(tokens).items():
                self.postings.setdefault(term, []).append((index, count))
        self.lengths = lengths
        self.avgdl = sum(lengths) / len(lengths)
        total = len(docs)
        self.idf = {
            term: math.log(1.0 + (total - len(posts) + 0.5) / (len(posts) + 0.5))
            for term, posts in self.postings.items()
        }
        self.tie_rank = [
            hashlib.sha256(f"{seed}\x00{doc['id']}".encode()).hexdigest() for doc in docs
        ]

    def search(self, query: str, k: int = DEFAULT_K) -> list[Hit]:
        """Top-k documents with a positive score, best first."""
        scores: dict[int, float] = {}
        # dict.fromkeys keeps first-occurrence order, so every document's float sum is
        # accumulated in the same term order.
        for term in dict.fromkeys(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for index, tf in self.postings[term]:
                norm = K1 * (1.0 - B + B * self.lengths[index] / self.avgdl)
                scores[index] = scores.get(index, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
        ranked = sorted(
            ((round(score, 6), index) for index, score in scores.items()),
            key=lambda item: (-item[0], self.tie_rank[item[1]]),
        )
        return [Hit(self.docs[index], score) for score, index in ranked[:k]]

    def response(self, query: str, k: int) -> dict[str, Any]:
        return {
            "query": query,
            "results": [
                {
                    "id": hit.doc["id"],
                    "title": hit.doc["title"],
                    "snippet": snippet(hit.doc["text"]),
                    "score": hit.score,
                }
                for hit in self.search(query, k)
            ],
        }


class BadRequestError(Exception):
    """A client error, answered with 400 and a JSON message."""


def _parse_k(raw: Any) -> int:
    if raw is None:
        return DEFAULT_K
    if isinstance(raw, bool):
        raise BadRequestError("'k' must be an integer")
    try:
        k = int(raw)
    except (TypeError, ValueError):
        raise BadRequestError("'k' must be an integer") from None
    if isinstance(raw, float) and raw != k:
        raise BadRequestError("'k' must be an integer")
    if not 1 <= k <= MAX_K:
        raise BadRequestError(f"'k' must be between 1 and {MAX_K}")
    return k


def _parse_query(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise BadRequestError("missing query: pass a non-empty 'query' (POST) or 'q' (GET)")
    return raw


def encode(obj: Any) -> bytes:
    """Deterministic JSON bytes for a response body."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class SearchHandler(BaseHTTPRequestHandler):
    """Routes requests to the server's index; every answer is JSON."""

    server: SearchServer
    protocol_version = "HTTP/1.1"
    server_version = "rlenv-search/1"
    sys_version = ""

    def send_response(self, code: int, message: str | None = None) -> None:
        # Like the base class but without a Date header, so recorded responses are reproducible.
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Server", self.version_string())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (base-class name)
        if self.server.log_requests:
            # The query string may carry an api_key; log only the path.
            sys.stderr.write(f"{self.command} {urlsplit(self.path).path} {args[1:]}\n")

    def _send(self, status: int, obj: Any) -> None:
        body = encode(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message})

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        params = parse_qs(parts.query, keep_blank_values=True)
        try:
            if parts.path == "/health":
                self._send(200, {"ok": True})
            elif parts.path == "/search":
                query = _parse_query(params.get("q", params.get("query", [None]))[0])
                k = _parse_k(params.get("k", [None])[0])
                self._send(200, self.server.index.response(query, k))
            elif parts.path.startswith("/doc/"):
                doc = self.server.index.by_id.get(unquote(parts.path[len("/doc/") :]))
                if doc is None:
                    self._error(404, "no such document")
                else:
                    self._send(200, doc)
            else:
                self._error(404, "not found")
        except BadRequestError as exc:
            self._error(400, str(exc))

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/search":
            self._drain()
            self._error(404, "not found")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                raise BadRequestError("request body too large")
            raw = self.rfile.read(length) if length > 0 else b""
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise BadRequestError('body must be JSON: {"query": str, "k": int}') from None
            if not isinstance(body, dict):
                raise BadRequestError('body must be a JSON object: {"query": str, "k": int}')
            query = _parse_query(body.get("query"))
            k = _parse_k(body.get("k"))
            self._send(200, self.server.index.response(query, k))
        except BadRequestError as exc:
            self._error(400, str(exc))
        except ValueError:
            self.close_connection = True
            self._error(400, "bad Content-Length")

    def _drain(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        elif length:
            self.close_connection = True


class SearchServer(ThreadingHTTPServer):
    """A threading HTTP server holding one BM25 index."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], index: BM25Index, log_requests: bool = False):
        self.index = index
        self.log_requests = log_requests
        super().__init__(address, SearchHandler)

    @property
    def host(self) -> str:
        host = self.server_address[0]
        return host.decode() if isinstance(host, bytes) else str(host)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def make_server(
    corpus_path: str | os.PathLike[str] = DEFAULT_CORPUS,
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
    log_requests: bool = False,
) -> SearchServer:
    """Load the corpus, build the index and bind (port 0 picks a free port)."""
    return SearchServer((host, port), BM25Index(load_corpus(corpus_path), seed), log_requests)


def start_in_thread(
    corpus_path: str | os.PathLike[str] = DEFAULT_CORPUS, seed: int = 0
) -> tuple[SearchServer, str]:
    """Serve on 127.0.0.1 with a free port from a daemon thread, for tests and benchmarks.

    Stop it with ``server.shutdown(); server.server_close()``.
    """
    server = make_server(corpus_path, seed)
    thread = threading.Thread(target=server.serve_forever, name="search-service", daemon=True)
    thread.start()
    return server, server.url


def _write_port_file(path: Path, port: int) -> None:
    # Write then rename, so a poller never reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deterministic BM25 search service.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port-file", type=Path, default=None)
    parser.add_argument("--log", action="store_true", help="log requests (paths only) to stderr")
    args = parser.parse_args(argv)
    try:
        server = make_server(args.corpus, args.seed, args.host, args.port, args.log)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever() to return, which runs in this (main) thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file is not None:
        _write_port_file(args.port_file, server.port)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
