"""Deterministic policies for the file-edit env: a baseline that solves it, a null that does not."""

from __future__ import annotations

import json
import re
from typing import Any

INSTRUCTION = re.compile(r"In (?P<path>\S+), replace `(?P<old>[^`]*)` with `(?P<new>[^`]*)`")


def _call(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{number}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
            }
        ],
    }


def baseline(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> Any:
    """Read the named file, apply the replacement, write it back, then say what changed."""
    task = next(m["content"] for m in messages if m["role"] == "user")
    found = INSTRUCTION.search(task)
    if found is None:
        return "I cannot parse the instruction."
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        return _call("read_file", {"path": found["path"]}, 0)
    if len(tool_results) == 1:
        content = tool_results[0]["content"]
        if content.startswith("error:"):
            return f"Could not read {found['path']}."
        updated = content.replace(found["old"], found["new"])
        return _call("write_file", {"path": found["path"], "content": updated}, 1)
    return f"Replaced `{found['old']}` with `{found['new']}` in {found['path']}."


def null(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> Any:
    """Claims success without touching anything: must score 0."""
    return "Done."
