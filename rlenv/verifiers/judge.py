"""`type: judge`: a model-graded verifier, frozen like the tools.

The judge is an OpenAI-compatible chat model given a rubric (a jinja2 template over the input's
fields, ``answer`` and ``prompt``). `rlenv record` calls it live and keeps each exchange in the
verifier's cassette (JSON lines ``{"key", "request", "reply"}``, sorted by key, no headers, no
credentials). What `rlenv run` (and `rlenv.trl`) do with a request is the judge's ``mode``:

- ``replay`` (default): only the cassette; a request never recorded is a `verifier_error`
  naming its key. An LLM judge is then as reproducible as a regex.
- ``record_missing``: a miss is judged live by the pinned judge (model, rubric, decoding) and
  appended to the cassette; the cassette only grows, so its hash is not part of the env
  fingerprint (a run on a grown cassette is the same env), and the run counts its live
  judgments (summary ``judges``).
- ``live``: every request is judged live (training on new checkpoints); run.json pins the
  judge's model, decoding and rubric digest, and the run directory keeps every exchange.

Live judgments are made outside the frozen world, by the orchestrator (:class:`Judges`): the
worker marks the verifier pending, the orchestrator asks the judge (it holds the endpoint and
the key; the world has neither) and completes the record. A judge whose ``base_url`` is one of
the spec's services (``http://NAME.rlenv.internal/...``) is started from ``services:`` (under
the frozen clock, as `rlenv record` starts it) at the first judgment that needs it, and stopped
when the run ends (:class:`JudgeServices`).

The reply's score is the first match of ``score_pattern`` (default ``score: N``), mapped from
``scale`` to [0, 1]; the verifier passes when that is at least ``threshold``. The reply itself
(the judge's reasoning) is the verifier's ``detail``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.errors import FixtureMiss, UserError
from rlenv.jsonl import json_lines, parse_json_line
from rlenv.verifiers.base import Grader, LiveJudgment, VerifierContext

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Judge, LoadedSpec, Verifier

PENDING_JUDGMENT = "judge: awaiting a live judgment"
"""A judge verifier's detail when the world left the judgment to the orchestrator."""
DETAIL_LIMIT = 4000  # characters of the judge's reply kept as the verifier's detail


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
    return judge_request(config, context.input, context.answer, context.messages)


def judge_request(
    config: Verifier,
    data: dict[str, Any],
    answer: str | None,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    """The request from a rollout's input fields, answer and messages (the world and the
    orchestrator build it alike)."""
    from rlenv.inputs import render

    judge = config.judge
    assert judge is not None
    # the input's prompt: the first user message (a system prompt comes before it)
    first = next((m for m in messages if m.get("role") == "user"), messages[0] if messages else {})
    prompt = first.get("content")
    fields = {**data, "answer": answer or "", "prompt": prompt or ""}
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

    base = base_url or os.environ.get("OPENAI_BASE_URL") or ""
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


def verdict_of(judge: Judge, reply: str) -> tuple[bool, float, str]:
    """(passed, score, detail) of a judge's reply; the detail is its reasoning, led by the
    score it gave."""
    found = re.search(judge.score_pattern, reply)
    reasoning = " ".join(reply.split())
    if len(reasoning) > DETAIL_LIMIT:
        reasoning = reasoning[: DETAIL_LIMIT - 1] + "…"
    if not found:
        return False, 0.0, f"judge gave no score matching {judge.score_pattern!r}: {reasoning}"
    low, high = judge.scale
    raw = float(found.group(1))
    score = min(1.0, max(0.0, (raw - low) / (high - low)))
    detail = f"judge score {raw:g} (of {low:g}-{high:g}): {reasoning}"
    return score >= judge.threshold, score, detail


def build(config: Verifier) -> Grader:
    judge = config.judge
    assert judge is not None
    cache: dict[str, str] | None = None

    def grade(context: VerifierContext) -> tuple[bool, float, str | None]:
        nonlocal cache
        request = request_of(config, context)
        key = key_of(request)
        if MODE.live:
            try:
                reply = _live_reply(request, judge.base_url or MODE.base_url)
            except Exception as exc:  # the recording cannot hold this verdict: say so loudly
                raise FixtureMiss(
                    f"judge {config.label}: no reply to record ({type(exc).__name__}: {exc})"
                ) from None
            _record(config.label, key, request, reply)
        elif judge.mode == "live":
            raise LiveJudgment(key)
        else:
            if cache is None:
                root = MODE.spec_root or Path.cwd()
                cache = load_cassette((root / judge.cassette_path).resolve())
            if key not in cache:
                if judge.mode == "record_missing":
                    raise LiveJudgment(key)
                raise FixtureMiss(
                    f"judge {config.label}: request {key[:19]}… was never recorded (judge mode"
                    " replay: run `rlenv record` with the judge reachable, or set judge.mode"
                    " record_missing or live to judge new answers)"
                )
            reply = cache[key]
        return verdict_of(judge, reply)

    return grade


# ---------------------------------------------------------------------------------------------
# Live judgments, made by the orchestrator (outside the frozen world).


def describe(loaded: LoadedSpec) -> dict[str, Any]:
    """run.json's ``judges``: each judge's mode, model, decoding and rubric digest (what a live
    judgment depended on)."""
    from rlenv.urls import public_url

    out: dict[str, Any] = {}
    for verifier in loaded.spec.verifiers:
        judge = verifier.judge
        if judge is None:
            continue
        out[verifier.label] = {
            "mode": judge.mode,
            "model": judge.model,
            "temperature": judge.temperature,
            "max_tokens": judge.max_tokens,
            "rubric_sha256": sha256_bytes(judge.rubric.encode("utf-8")),
            "score_pattern": judge.score_pattern,
            "scale": list(judge.scale),
            "threshold": judge.threshold,
            **({"base_url": public_url(judge.base_url)} if judge.base_url else {}),
        }
    return out


class Judges:
    """Completes records whose judge verifiers the world left pending: each request judged
    once (a cassette's reply first in ``record_missing`` mode, else live), the exchange
    appended to ``log_dir/judge-<name>.jsonl`` (a run directory) and, in ``record_missing``
    mode, merged into the cassette by :meth:`close`."""

    def __init__(
        self,
        loaded: LoadedSpec,
        inputs: dict[str, dict[str, Any]],
        log_dir: Path | None,
        base_url: str | None = None,
    ) -> None:
        self.loaded = loaded
        self.inputs = inputs
        self.log_dir = log_dir
        self.base_url = base_url
        self.configs = {
            v.label: v
            for v in loaded.spec.verifiers
            if v.judge is not None and v.judge.mode != "replay"
        }
        self.known: dict[str, dict[str, str]] = {}  # label -> key -> reply (this process)
        self.new: dict[str, list[str]] = {}  # label -> exchanges (JSON lines) made live
        self.counts: dict[str, dict[str, int]] = {
            label: {"live": 0, "replayed": 0} for label in self.configs
        }
        self.lock = threading.Lock()
        self.services = JudgeServices(loaded)

    def __bool__(self) -> bool:
        return bool(self.configs)

    def _reply(self, config: Verifier, request: dict[str, Any]) -> str:
        judge = config.judge
        assert judge is not None
        label = config.label
        if label not in self.known:
            path = self.cassette(config)
            self.known[label] = load_cassette(path) if path is not None else {}
        key = key_of(request)
        if key in self.known[label] and judge.mode == "record_missing":
            self.counts[label]["replayed"] += 1
            return self.known[label][key]
        reply = _live_reply(request, self.services.reachable(judge.base_url or self.base_url))
        self.counts[label]["live"] += 1
        self.known[label][key] = reply
        line = json.dumps({"key": key, "reply": reply, "request": request}, sort_keys=True)
        self.new.setdefault(label, []).append(line)
        if self.log_dir is not None:
            with open(self.log_dir / f"judge-{label}.jsonl", "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        return reply

    def cassette(self, config: Verifier) -> Path | None:
        assert config.judge is not None
        if config.judge.cassette is None:
            return None
        return self.loaded.resolve(config.judge.cassette.path)

    def settle(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with its pending judgments made (passed, rewards and digest again)."""
        results = record.get("verifiers") or []
        pending = [
            (i, r)
            for i, r in enumerate(results)
            if r.get("detail") == PENDING_JUDGMENT and r.get("name") in self.configs
        ]
        if not pending:
            return record
        data = self.inputs.get(str(record.get("input_id")), {})
        with self.lock:
            for index, result in pending:
                config = self.configs[result["name"]]
                assert config.judge is not None
                request = judge_request(
                    config, data, record.get("answer"), record.get("messages") or []
                )
                try:
                    reply = self._reply(config, request)
                except Exception as exc:  # no verdict can be given: the rollout does not pass
                    detail = f"judge {config.label}: no live judgment ({type(exc).__name__}: {exc})"
                    results[index] = {**result, "detail": detail}
                    if record.get("status") != "verifier_error":
                        record["status"], record["error"] = "verifier_error", detail
                    continue
                passed, score, detail = verdict_of(config.judge, reply)
                results[index] = {**result, "passed": passed, "score": score, "detail": detail}
        return _regraded(self.loaded, record)

    def close(self) -> dict[str, dict[str, int]]:
        """Merge ``record_missing`` judgments into their cassettes; the counts per judge."""
        from filelock import FileLock

        for label, lines in self.new.items():
            config = self.configs[label]
            path = self.cassette(config)
            if path is None or config.judge is None or config.judge.mode != "record_missing":
                continue
            staged = path.with_name(path.name + f".{os.getpid()}.new")
            staged.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            try:
                with FileLock(str(path) + ".lock"):
                    merge_recording(staged, path, keep=True)
            finally:
                staged.unlink(missing_ok=True)
        self.new = {}
        return self.counts


class JudgeServices:
    """The spec's services a live judgment reaches by logical URL, started at first use."""

    def __init__(self, loaded: LoadedSpec) -> None:
        self.loaded = loaded
        self.routes: dict[str, str] = {}  # logical host -> real HOST:PORT
        self._started: Any = None  # an ExitStack while any service runs

    def reachable(self, base_url: str | None) -> str | None:
        """`base_url` with a service's logical host replaced by where it now runs (started
        here if need be); any other URL as it is."""
        from urllib.parse import urlsplit, urlunsplit

        if not base_url:
            return base_url
        parts = urlsplit(base_url)
        host = (parts.hostname or "").lower()
        service = next((s for s in self.loaded.spec.services if s.host == host), None)
        if service is None:
            return base_url
        if host not in self.routes:
            self.routes.update(self._start(service))
        return urlunsplit(parts._replace(netloc=self.routes[host]))

    def _start(self, service: Any) -> dict[str, str]:
        import atexit
        import contextlib

        from rlenv.errors import RunFailed
        from rlenv.sandbox import faketime_env
        from rlenv.world.freeze import FROZEN_ENV
        from rlenv.world.services import started_services

        clock = faketime_env(self.loaded.spec.time.isoformat(), "UTC", stopped=True)
        if not clock:
            raise RunFailed(
                f"libfaketime is not installed: the judge service {service.name!r} runs under its"
                " frozen clock (Debian/Ubuntu: apt-get install faketime)"
            )
        if self._started is None:
            self._started = contextlib.ExitStack()
            atexit.register(self.stop)
        started = started_services([service], self.loaded.root, {**FROZEN_ENV, **clock})
        routes: dict[str, str] = self._started.enter_context(started)
        return routes

    def stop(self) -> None:
        started, self._started = self._started, None
        self.routes = {}
        if started is not None:
            started.close()


def _regraded(loaded: LoadedSpec, record: dict[str, Any]) -> dict[str, Any]:
    """`passed` and the verifier components of `rewards` from the record's verifier results
    (as the worker computes them), and the record's digest again."""
    import math

    from rlenv.results import seal

    results = record.get("verifiers") or []
    graded = [r for r in results if r.get("passed") is not None]
    failed = record.get("status") == "verifier_error"
    record["passed"] = not failed and all(r["passed"] for r in graded)  # as the worker decides
    reward = loaded.spec.reward
    rewards = record.get("rewards")
    if reward is not None and isinstance(rewards, dict):
        by_name = {r["name"]: r for r in results}
        for name, component in reward.components.items():
            if component.verifier is None:
                continue
            result = by_name.get(component.verifier)
            value = None
            if result is not None and result.get("passed") is not None:
                raw = float(result["passed"]) if component.use == "passed" else result["score"]
                value = None if raw is None else float(raw)
            rewards[name] = value
        present = [
            (reward.components[name].weight, value)
            for name, value in rewards.items()
            if name != "total" and value is not None
        ]
        total = math.fsum(w * v for w, v in present) if present and not failed else None
        rewards["total"] = total  # never a partial total
    record.pop("digest", None)
    return seal(record)


class JudgingWriter:
    """A results writer that makes a record's pending judgments (:class:`Judges`) before it
    is written; closing it merges the ``record_missing`` judgments into their cassettes."""

    def __init__(self, writer: Any, judges: Judges) -> None:
        self.writer = writer
        self.judges = judges

    def write(self, record: dict[str, Any]) -> None:
        self.writer.write(self.judges.settle(record))

    def close(self) -> None:
        try:
            self.judges.close()
        finally:
            self.judges.services.stop()
            self.writer.close()


def judging_writer(loaded: LoadedSpec, inputs: list[Any], writer: Any, run_dir: Path) -> Any:
    """`writer`, completing live judgments first when a judge's mode asks for them."""
    if not any(v.judge is not None and v.judge.mode != "replay" for v in loaded.spec.verifiers):
        return writer  # no live judge: the inputs are not parsed for one (10k: ~15 ms)
    judges = Judges(loaded, {str(record.id): record.data for record in inputs}, run_dir)
    return JudgingWriter(writer, judges) if judges else writer
