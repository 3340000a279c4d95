"""`type: judge`: a model-graded verifier, frozen like the tools.

The judge is an OpenAI-compatible chat model given a rubric (a jinja2 template over the input's
fields, ``answer`` and ``prompt``). `rlenv record` calls it live and keeps each exchange in the
verifier's cassette (JSON lines ``{"key", "request", "reply"}``, sorted by key, no headers, no
credentials); `rlenv run` only replays: the same request (model, rendered rubric, decoding) finds
the same reply, and a request that was never recorded is a `verifier_error` naming its key. So an
LLM judge is as reproducible as a regex.

The reply's score is the first match of ``score_pattern`` (default ``score: N``), mapped from
``scale`` to [0, 1]; the verifier passes when that is at least ``threshold``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.errors import FixtureMiss, UserError
from rlenv.jsonl import json_lines, parse_json_line
from rlenv.spec import Verifier
from rlenv.verifiers.base import Check, VerifierContext


@dataclass
class JudgeMode:
    """How judges behave in this process: replay (default) or live recording, and where."""

    live: bool = False
    spec_root: Path | None = None
    record_dir: Path | None = None
    base_url: str | None = None


MODE = JudgeMode()
_LOCK = threading.Lock()


def configure(
    *,
    live: bool,
    spec_root: Path,
    record_dir: Path | None = None,
    base_url: str | None = None,
) -> None:
    """Set by the worker at start: replay from cassettes, or (recording) call live and write."""
    MODE.live, MODE.spec_root, MODE.record_dir, MODE.base_url = (
        live,
        spec_root,
        record_dir,
        base_url,
    )


def request_of(config: Verifier, context: VerifierContext) -> dict[str, Any]:
    """The chat request a judge makes for a rollout (what its cassette is keyed by)."""
    from rlenv.inputs import render

    judge = config.judge
    assert judge is not None
    prompt = context.messages[0].get("content") if context.messages else None
    fields = {**context.input, "answer": context.answer or "", "prompt": prompt or ""}
    return {
        "model": judge.model.removeprefix("openai:"),
        "messages": [{"role": "user", "content": render(judge.rubric, fields)}],
        "temperature": judge.temperature,
        "max_tokens": judge.max_tokens,
    }


def key_of(request: dict[str, Any]) -> str:
    return "sha256:" + sha256_bytes(canonical_bytes(request))


def load_cassette(path: Path) -> dict[str, str]:
    """key -> reply of a judge cassette (one JSON object per line)."""
    replies: dict[str, str] = {}
    if not path.is_file():
        return replies
    try:  # split on newlines only (a reply may hold U+2028), each line bounded JSON
        lines = list(json_lines(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the judge cassette: {exc}", where=str(path)) from None
    for number, line in lines:
        if not line.strip():
            continue
        try:
            entry = parse_json_line(line)
            replies[str(entry["key"])] = str(entry["reply"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"bad judge cassette line: {exc}", where=f"{path}:{number}") from None
    return replies


def _live_reply(request: dict[str, Any], base_url: str | None) -> str:
    import httpx

    from rlenv.urls import normalise_base_url

    base = base_url or MODE.base_url or os.environ.get("OPENAI_BASE_URL") or ""
    if not base:
        raise UserError("a judge verifier records against judge.base_url or OPENAI_BASE_URL")
    base = normalise_base_url(base)
    headers = {}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    response = httpx.post(f"{base}/chat/completions", json=request, headers=headers, timeout=60)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"] or "")


def _record(name: str, key: str, request: dict[str, Any], reply: str) -> None:
    assert MODE.record_dir is not None
    path = MODE.record_dir / f"judge-{name}.jsonl"
    entry = json.dumps({"key": key, "reply": reply, "request": request}, sort_keys=True)
    with _LOCK, open(path, "a", encoding="utf-8") as handle:
        handle.write(entry + "\n")


def merge_recording(recorded: Path, target: Path, *, keep: bool = True) -> tuple[int, int]:
    """Fold a recording's exchanges into the cassette (sorted by key, one per key; `keep`:
    the cassette's earlier exchanges stay); return (exchanges, new). Written atomically."""
    entries: dict[str, str] = {}
    if keep and target.is_file():
        entries.update(
            {json.loads(line)["key"]: line for line in target.read_text().splitlines() if line}
        )
    before = len(entries)
    for line in recorded.read_text().splitlines() if recorded.is_file() else []:
        if line:
            entries.setdefault(json.loads(line)["key"], line)
    from rlenv.files import atomic_write

    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, "".join(entries[key] + "\n" for key in sorted(entries)))
    return len(entries), len(entries) - before


def build(config: Verifier) -> Check:
    judge = config.judge
    assert judge is not None
    pattern = re.compile(judge.score_pattern)
    low, high = judge.scale
    cache: dict[str, str] | None = None

    def check(context: VerifierContext) -> tuple[bool, float, str | None]:
        nonlocal cache
        request = request_of(config, context)
        key = key_of(request)
        if MODE.live:
            try:
                reply = _live_reply(request, judge.base_url)
            except Exception as exc:  # the recording cannot hold this verdict: say so loudly
                raise FixtureMiss(
                    f"judge {config.label}: no reply to record ({type(exc).__name__}: {exc})"
                ) from None
            _record(config.label, key, request, reply)
        else:
            if cache is None:
                root = MODE.spec_root or Path.cwd()
                cache = load_cassette((root / judge.cassette.path).resolve())
            if key not in cache:
                raise FixtureMiss(
                    f"judge {config.label}: request {key[:19]}… was never recorded"
                    " (run `rlenv record` with the judge reachable)"
                )
            reply = cache[key]
        found = pattern.search(reply)
        if not found:
            return False, 0.0, f"judge gave no score matching {judge.score_pattern!r}"
        raw = float(found.group(1))
        score = min(1.0, max(0.0, (raw - low) / (high - low)))
        passed = score >= judge.threshold
        return passed, score, None if passed else f"judge score {raw:g} (of {low:g}-{high:g})"

    return check
