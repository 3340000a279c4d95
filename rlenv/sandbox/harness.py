"""The in-sandbox half of ``run_python_tests``: copied into the workdir as ``_rlenv_runner.py``
and run there by path. It imports ``solution.py`` and answers the trusted parent's requests,
one JSON line each, on a private copy of the stdin/stdout pipe:

- ``{"id": ID, "op": "load"}`` -> ``{"id": ID, "ok": true, "names": {NAME: {"kind":
  "function"} | {"kind": "value", "value": V}}}`` (the module's public names);
- ``{"id": ID, "op": "call", "name": N, "args": [...], "kwargs": {...}}`` -> ``{"id": ID,
  "ok": true, "value": V}`` or ``{"id": ID, "ok": false, "error_type": T, "error": MSG}``.

Values cross only as JSON of plain types (None, bool, int, float, str, list, dict with str
keys), checked by exact type here and again in the parent. The tests and the expected values
never come here: the parent runs the tests and decides the verdict; this process can only
answer calls. File descriptors 0 and 1 are redirected away, so what the solution prints does
not reach the pipe. Runs under the sandboxed interpreter: standard library only.
"""

from __future__ import annotations

import io
import json
import os
import sys
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 50
PLAIN = (type(None), bool, int, float, str)


class _Capped(io.TextIOBase):
    def __init__(self, limit: int = 4096) -> None:
        self.size, self.limit = 0, limit

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.size += len(s)
        return len(s)


def plain(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is JSON of plain types, by exact type (no subclasses)."""
    if depth > MAX_DEPTH:
        return False
    kind = type(value)
    if kind in PLAIN:
        return True
    if kind is list:
        return all(plain(item, depth + 1) for item in value)
    if kind is tuple:
        return all(plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and plain(v, depth + 1) for k, v in value.items())
    return False


def _error(message_id: Any, exc: BaseException) -> dict[str, Any]:
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]
    return {"id": message_id, "ok": False, "error_type": type(exc).__name__, "error": text}


def _load(message_id: Any) -> tuple[Any, dict[str, Any]]:
    try:
        import solution  # noqa: PLC0415 - the model's module, found in the workdir
    except BaseException as exc:
        return None, _error(message_id, exc)
    names: dict[str, Any] = {}
    for name, value in list(vars(solution).items()):
        if name.startswith("_"):
            continue
        if callable(value):
            names[name] = {"kind": "function"}
        elif plain(value):
            names[name] = {"kind": "value", "value": value}
    return solution, {"id": message_id, "ok": True, "names": names}


def _call(module: Any, request: dict[str, Any]) -> dict[str, Any]:
    message_id = request.get("id")
    try:
        function = getattr(module, request["name"])
        value = function(*request.get("args", []), **request.get("kwargs", {}))
    except BaseException as exc:
        return _error(message_id, exc)
    if not plain(value):
        return {
            "id": message_id,
            "ok": False,
            "error_type": "TypeError",
            "error": f"returned a {type(value).__name__}, not JSON of plain types",
        }
    return {"id": message_id, "ok": True, "value": value}


def main() -> None:
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdin = io.StringIO("")
    sys.stdout = sys.stderr = _Capped()
    sys.path.insert(0, os.getcwd())
    module = None
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if request.get("op") == "load":
            module, reply = _load(request.get("id"))
        elif module is None:
            reply = {
                "id": request.get("id"),
                "ok": False,
                "error_type": "ImportError",
                "error": "solution not loaded",
            }
        else:
            reply = _call(module, request)
        try:
            text = json.dumps(reply)
        except (TypeError, ValueError) as exc:
            text = json.dumps(_error(request.get("id"), exc))
        replies.write(text + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
