"""Whether what a worker sent is the reply the call expects: its shape, and bounded data.

`rlenv.executors.wire` makes sure a message can only unpickle into data; this module checks
that data before the orchestrator uses it. In-world code can write its own messages to the
worker's pipe (a record nested 200,000 deep, a `("raise", RecursionError())`, a record of
another rollout), and a worker can fail in a way of its own (an exception raised while a
record was sealed). Either way, what is not the call's reply is the rollout's error status
(the executor replaces the worker: after a forged message its replies are out of step), never
an exception that ends the run.
"""

from __future__ import annotations

from typing import Any

from rlenv.agent import RolloutTimeout, ToolCrash, ToolOutcome
from rlenv.bounds import MAX_ERROR_CHARS, MAX_RECORD_BYTES, MAX_REPLY_BYTES, bounds_problem
from rlenv.canonical import MAX_DEPTH
from rlenv.errors import FixtureMiss, RunFailed
from rlenv.results import Status
from rlenv.worker.config import RolloutTask

RAISED: dict[str, tuple[type[BaseException], ...]] = {
    "tool": (FixtureMiss, ToolCrash, RolloutTimeout, RunFailed),
    "user": (FixtureMiss, ToolCrash, RolloutTimeout, RunFailed),
}
"""Per call, the exceptions a worker raises to its caller (the rollout loop classifies them);
any call may raise RunFailed (the worker cannot serve at all)."""
_ANY_CALL: tuple[type[BaseException], ...] = (RunFailed,)
_STATUSES = {status.value for status in Status}
_RECORD_DEPTH = 2 * MAX_DEPTH  # the record's own levels around the user data it holds


def checked(
    name: str, message: tuple[str, Any] | None, task: RolloutTask | None
) -> tuple[str, Any] | None:
    """A reply ("ok" or "raise") as it came when it is the reply call `name` expects (bounded
    data of the right shape); else ("unsafe", what it was): the rollout's error, never the
    run's end. Other messages (None: no answer in time; "dead", "died"...) as they came."""
    if message is None or message[0] not in ("ok", "raise"):
        return message
    problem = reply_problem(name, message, task)
    return message if problem is None else ("unsafe", problem)


def reply_problem(name: str, message: tuple[str, Any], task: RolloutTask | None) -> str | None:
    """What makes `message` (("ok", value) or ("raise", exception)) not a reply to call
    `name` for `task`; None when it is one."""
    kind, value = message
    if kind == "raise":
        return _raised_problem(name, value)
    if kind != "ok":
        return f"a message {kind!r}"
    if name in ("run_rollout", "finish"):
        return record_problem(value, task)
    if name == "grade":
        if not (isinstance(value, tuple) and len(value) == 3):
            return f"a {type(value).__name__}, not a graded record"
        if not all(type(count) is int for count in value[1:]):
            return "grader-cache counts that are not integers"
        return record_problem(value[0], None)
    if name == "tool":
        return _outcome_problem(value)
    if name == "user":
        if value is not None and type(value) is not str:
            return f"a {type(value).__name__}, not a user's message"
        problem = bounds_problem(value, max_bytes=MAX_REPLY_BYTES)
        return None if problem is None else f"a user's message that {problem}"
    if name == "prepare":
        return None if value is None else f"a {type(value).__name__} for a snapshot copy"
    return f"a reply to an unknown call {name!r}"


def _raised_problem(name: str, exception: Any) -> str | None:
    if not isinstance(exception, RAISED.get(name, _ANY_CALL)):
        text = str(exception)[:200] if isinstance(exception, BaseException) else ""
        text = " ".join(text.split())  # one line, whatever the exception's text holds
        return f"it raised {type(exception).__name__}" + (f": {text}" if text else "")
    state = {"args": list(exception.args), **vars(exception)}
    problem = bounds_problem(state, max_bytes=MAX_ERROR_CHARS)
    return None if problem is None else f"an exception whose {problem}"


def _outcome_problem(outcome: Any) -> str | None:
    if type(outcome) is not ToolOutcome:
        return f"a {type(outcome).__name__}, not a tool's outcome"
    fields = vars(outcome)
    types = {"content": str, "fixture": str, "ok": bool, "unreachable": bool, "traceback": list}
    for field, kind in types.items():
        if type(fields.get(field)) is not kind:
            return f"a tool outcome whose {field} is not a {kind.__name__}"
    if fields.get("error") is not None and type(fields["error"]) is not str:
        return "a tool outcome whose error is not a str"
    problem = bounds_problem(fields, max_bytes=MAX_REPLY_BYTES + MAX_ERROR_CHARS)
    return None if problem is None else f"a tool outcome that {problem}"


def record_problem(record: Any, task: RolloutTask | None) -> str | None:
    """What makes `record` not a results line of `task` (any rollout's when None)."""
    if type(record) is not dict:
        return f"a {type(record).__name__}, not a record"
    if task is not None and (
        record.get("input_index") != task.input_index or record.get("rollout") != task.rollout
    ):
        return "a record of another rollout"
    if record.get("status") not in _STATUSES:
        return f"a record whose status is {str(record.get('status'))[:40]!r}"
    problem = bounds_problem(record, max_depth=_RECORD_DEPTH, max_bytes=MAX_RECORD_BYTES)
    return None if problem is None else f"a record that {problem}"
