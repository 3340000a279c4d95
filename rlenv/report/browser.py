"""The sample browser of report.html and compare.html: every rollout as compact JSON that the
page's own script filters and pages (status, verdict, reward range, input fields, text) and
renders one page at a time, with a rollout's trajectory and error drawn only when opened.

Everything the page needs is in one ``<script type="application/json">`` blob, so a page of
10 000 rollouts costs one JSON parse and 50 rows of DOM, not 10 000 rows of markup.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.metrics import proxy_reward

MAX_TEXT = 20_000
"""Characters kept of any one text (answer, message, error); results.jsonl has the rest."""
MAX_FIELD_TEXT = 120
"""Input fields with longer text values are searched, not offered as a filter."""
MAX_FACET_VALUES = 50
"""An input field becomes a filter (a select) when it has at most this many distinct values."""
HIDDEN_FIELDS = frozenset({"id", "prompt", "messages"})


def input_fields(run_meta: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Each input's scalar fields (``{input_id: {field: value}}``) from the inputs file of the
    spec the run was made from (run.json ``spec``), and why not when they cannot be read (the
    spec moved or no longer loads): the page then offers no field filters."""
    from rlenv.inputs import load_inputs
    from rlenv.spec import load_spec

    spec = run_meta.get("spec")
    if not spec:
        return {}, "run.json names no spec"
    try:
        loaded = load_spec(Path(str(spec)))
        inputs = load_inputs(
            loaded.inputs_path,
            templated=loaded.spec.prompt is not None,
            rows=loaded.spec.inputs.dataset is not None,
        )
    except (UserError, OSError) as exc:
        return {}, str(exc).splitlines()[0]
    out: dict[str, dict[str, Any]] = {}
    for record in inputs:
        out[record.id] = {
            key: value
            for key, value in record.data.items()
            if key not in HIDDEN_FIELDS and (value is None or isinstance(value, str | int | float))
        }
    return out, None


def _text(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + f"… ({len(value) - MAX_TEXT} more characters in results.jsonl)"
    return value


def _number(value: Any) -> float | None:
    """A finite number, else None (JSON has no NaN; a bool is no reward)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def state_rows(state: Any) -> list[list[str]]:
    """A state verifier's diff (``sqlite_state``/``json_state``) as ``[where, kind, change]``
    rows: schema changes, then rows inserted/deleted/updated per table, or changed JSON
    leaves; at most what the record kept (its counts say how many there were)."""
    if not isinstance(state, Mapping):
        return []
    rows = [[str(state.get("file") or ""), "schema", str(s)] for s in state.get("schema") or []]
    for table, changes in sorted((state.get("tables") or {}).items()):
        for kind in ("inserted", "deleted", "updated"):
            for key, value in (changes.get(kind) or {}).items():
                if kind == "updated" and isinstance(value, Mapping):
                    text = ", ".join(f"{c}: {_show(a)} → {_show(b)}" for c, (a, b) in value.items())
                else:
                    text = _show(value)
                rows.append([f"{table} {key}", kind, _text(text)])
    for pointer, pair in (state.get("changed") or {}).items():
        was, now = pair if isinstance(pair, list) and len(pair) == 2 else (None, pair)
        rows.append([str(pointer), "changed", _text(f"{_show(was)} → {_show(now)}")])
    return rows


def _verifier(verifier: Mapping[str, Any]) -> list[Any]:
    """``[name, passed, detail, traceback, state]`` (state: :func:`state_rows`), trailing
    empty entries left out."""
    out = [
        verifier.get("name"),
        verifier.get("passed"),
        _text(verifier.get("detail")),
        verifier.get("traceback"),
        state_rows(verifier.get("state")),
    ]
    while len(out) > 2 and not out[-1]:
        out.pop()
    return out


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.get("role")}
    content = message.get("content")
    if content is not None:
        out["content"] = _text(content if isinstance(content, str) else json.dumps(content))
    for key in ("name", "tool_call_id"):
        if message.get(key):
            out[key] = message[key]
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "name": (call.get("function") or {}).get("name", call.get("name")),
                "arguments": _text(str((call.get("function") or {}).get("arguments", ""))),
            }
            for call in calls
            if isinstance(call, Mapping)
        ]
    return out


class SampleTable:
    """Rows for the browser, built run by run; :meth:`data` is the blob the page reads.

    A row is one rollout: ``run`` (index into ``runs``), ``i`` input id, ``r`` rollout, ``s``
    status, ``p`` passed (True/False/None), ``w`` reward, ``a`` answer, ``v`` verifiers
    ``[name, passed, detail, traceback, state]``, ``c`` reward components, ``t`` tool calls
    ``[name, arguments, fixture, ok, error]``, ``q`` index of the prompt (the messages before
    the first assistant turn, stored once in ``prompts``), ``m`` the messages after it (``fa``
    set when the last of them, an assistant message whose text is the answer, is left out to
    be drawn from ``a``), ``e``
    error and ``tb`` its traceback, ``re``/``rtb`` a reward-model error, ``u`` a simulated
    user's turns ``[user_turn, after_turn, content, ended]``, ``x`` marks
    (``suspect``, ``collapsed``).
    """

    def __init__(self, fields: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.fields = dict(fields or {})
        self.runs: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.prompts: list[list[dict[str, Any]]] = []
        self._prompt_index: dict[str, int] = {}

    def _prompt(self, messages: Sequence[Mapping[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
        split = next(
            (n for n, m in enumerate(messages) if m.get("role") == "assistant"), len(messages)
        )
        prompt = [_message(m) for m in messages[:split]]
        key = json.dumps(prompt, sort_keys=True)
        if key not in self._prompt_index:
            self._prompt_index[key] = len(self.prompts)
            self.prompts.append(prompt)
        return self._prompt_index[key], [_message(m) for m in messages[split:]]

    def add_run(
        self,
        name: str,
        records: Iterable[Mapping[str, Any]],
        *,
        suspects: Iterable[tuple[str, int]] = (),
        collapsed: Iterable[str] = (),
    ) -> None:
        """Every record of one run, in (input, rollout) order, marked when it is a suspect
        (``(input_id, rollout)`` pairs) or its input collapsed in this run."""
        run = len(self.runs)
        self.runs.append(name)
        suspect_keys = {(str(i), int(r)) for i, r in suspects}
        collapsed_ids = {str(i) for i in collapsed}
        ordered = sorted(records, key=lambda r: (str(r.get("input_id")), int(r.get("rollout", 0))))
        for record in ordered:
            input_id, rollout = str(record.get("input_id")), int(record.get("rollout", 0))
            prompt, messages = self._prompt(record.get("messages") or [])
            row: dict[str, Any] = {
                "run": run,
                "i": input_id,
                "r": rollout,
                "s": str(record.get("status", "ok")),
                "p": record.get("passed"),
                "w": proxy_reward(record),
                "a": _text(record.get("answer")),
                "v": [_verifier(v) for v in record.get("verifiers") or []],
                "q": prompt,
                "m": messages,
            }
            answer = record.get("answer")
            last = messages[-1] if messages else {}
            if (
                answer is not None
                and last.get("role") == "assistant"
                and last.get("content") == row["a"]
                and not last.get("tool_calls")
            ):
                row["m"] = messages[:-1]  # the answer itself: stored once, in "a"
                row["fa"] = 1
            optional = {
                "c": {str(k): _number(v) for k, v in (record.get("rewards") or {}).items()},
                "t": [
                    [
                        c.get("name"),
                        _text(json.dumps(c.get("arguments"), sort_keys=True, default=str)),
                        c.get("fixture"),
                        c.get("ok"),
                        _text(c.get("error")),
                    ]
                    for c in record.get("tool_calls") or []
                ],
                "u": [  # a simulated user's turns (rlenv.worker.conversation)
                    [
                        u.get("user_turn"),
                        u.get("after_turn"),
                        _text(u.get("content")),
                        u.get("ended"),
                    ]
                    for u in (record.get("extra") or {}).get("user_turns") or []
                ],
                "e": _text(record.get("error")),
                "tb": record.get("traceback"),
                "re": _text(record.get("reward_error")),
                "rtb": record.get("reward_traceback"),
                "x": [
                    mark
                    for mark, on in (
                        ("suspect", (input_id, rollout) in suspect_keys),
                        ("collapsed", input_id in collapsed_ids),
                    )
                    if on
                ],
            }
            row.update({key: value for key, value in optional.items() if value})
            self.rows.append(row)

    def data(self) -> dict[str, Any]:
        """The blob: ``runs``, ``rows``, ``prompts``, ``inputs`` (fields of the inputs that
        have rows), ``facets`` (field -> sorted distinct values, for the filter selects),
        ``statuses`` and ``verifiers`` (names seen)."""
        ids = {row["i"] for row in self.rows}
        inputs = {i: dict(self.fields[i]) for i in sorted(ids) if i in self.fields}
        values: dict[str, set[str]] = {}
        for fields in inputs.values():
            for key, value in fields.items():
                text = "" if value is None else str(value)
                values.setdefault(key, set()).add(text)
        facets = {
            key: sorted(found)
            for key, found in sorted(values.items())
            if len(found) <= MAX_FACET_VALUES and all(len(v) <= MAX_FIELD_TEXT for v in found)
        }
        return {
            "runs": self.runs,
            "rows": self.rows,
            "prompts": self.prompts,
            "inputs": inputs,
            "facets": facets,
            "statuses": sorted({row["s"] for row in self.rows}),
            "verifiers": sorted({str(v[0]) for row in self.rows for v in row["v"]}),
        }


def json_blob(value: Any) -> Any:
    """``value`` as JSON safe inside ``<script type="application/json">`` (no ``</script>``
    or ``<!--`` can end or comment it: every ``<`` is escaped), as template Markup."""
    from rlenv.report.common import markup

    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return markup(text.replace("<", "\\u003c").replace("\u2028", "\\u2028"))
