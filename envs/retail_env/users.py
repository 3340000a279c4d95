"""The simulated customer: answers from the input's fields (which order), ends when served."""

from __future__ import annotations

import re
from typing import Any

STOP = "###STOP###"


def customer(messages: list[dict[str, Any]], input: dict[str, Any], ctx: Any) -> str | None:
    """Give the order number when asked; thank and stop once the agent says it is done or where
    the order is (or
    stop when the agent gives up)."""
    said = next(
        (m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), ""
    )
    order_id = str(input["order_id"])
    if re.search(r"\b(cancelled|refunded|shipped)\b", said) and order_id in said:
        return f"Thank you! {STOP}"
    if "order number" in said.lower():
        return f"It is order {order_id}."
    return f"Never mind. {STOP}"
