"""The retail env's tools: they read and change `orders.db` in the rollout's snapshot copy."""

from __future__ import annotations

import sqlite3
from typing import Any


def _db() -> sqlite3.Connection:
    return sqlite3.connect("orders.db")  # the rollout's copy (the tools run in its workdir)


def find_order(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The order's status and total, or an error the agent reads."""
    with _db() as db:
        row = db.execute(
            "SELECT order_id, customer, status, total_cents FROM orders WHERE order_id = ?",
            (arguments["order_id"],),
        ).fetchone()
    if row is None:
        raise ValueError(f"no order {arguments['order_id']}")
    return {"order_id": row[0], "customer": row[1], "status": row[2], "total_cents": row[3]}


def _move(order_id: str, allowed: str, to: str) -> str:
    db = _db()
    try:
        changed = db.execute(
            "UPDATE orders SET status = ? WHERE order_id = ? AND status = ?",
            (to, order_id, allowed),
        ).rowcount
        db.commit()
    finally:
        db.close()
    if not changed:
        raise ValueError(f"order {order_id} is not {allowed}")
    return f"order {order_id} is now {to}"


def cancel_order(arguments: dict[str, Any], ctx: Any) -> str:
    """Cancel a pending order."""
    return _move(arguments["order_id"], "pending", "cancelled")


def refund_order(arguments: dict[str, Any], ctx: Any) -> str:
    """Refund a delivered order."""
    return _move(arguments["order_id"], "delivered", "refunded")
