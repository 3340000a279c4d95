"""Held-out inputs: a JSONL file of records with unique ids, pinned by hash in the spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.errors import SpecError
from rlenv.jsonl import read_objects


@dataclass(frozen=True)
class InputRecord:
    index: int
    id: str
    data: dict[str, Any]

    def messages(self, system_prompt: str | None) -> list[dict[str, Any]]:
        """The conversation the policy starts from (reference fields stay hidden)."""
        messages: list[dict[str, Any]] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if "messages" in self.data:
            messages.extend(dict(message) for message in self.data["messages"])
        else:
            messages.append({"role": "user", "content": self.data["prompt"]})
        return messages


def load_inputs(path: Path) -> list[InputRecord]:
    """Parse and check the inputs file; every problem names file:line."""
    records: list[InputRecord] = []
    seen: dict[str, int] = {}
    for where, data in read_objects(path, what="inputs file", error=SpecError):
        raw_id = data.get("id")
        if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
            raise SpecError("each input needs an 'id' (non-empty string or integer)", where=where)
        input_id = str(raw_id)
        if input_id in seen:
            raise SpecError(
                f"duplicate input id {input_id!r} (first on line {seen[input_id]})", where=where
            )
        seen[input_id] = int(where.rsplit(":", 1)[1])
        if "messages" in data:
            if not isinstance(data["messages"], list) or not all(
                isinstance(message, dict) and "role" in message for message in data["messages"]
            ):
                raise SpecError("'messages' must be a list of {role, content} objects", where=where)
        elif not isinstance(data.get("prompt"), str):
            raise SpecError("each input needs a 'prompt' string or a 'messages' list", where=where)
        records.append(InputRecord(index=len(records), id=input_id, data=data))
    if not records:
        raise SpecError("inputs file has no records", where=str(path))
    return records
