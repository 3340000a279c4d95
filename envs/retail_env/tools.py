"""The retail env's tools: they read and change `orders.db` in the rollout's snapshot copy (the
state the verifier grades) and move money or look shipments up through the store's backend, an
HTTP service (`envs/retail_env/service.py`). At run time that HTTP is replayed from the
`store` cassette; `rlenv record` starts the service itself (`services:`). The base URL is the
service's logical URL, ``ctx.services["store"]`` (also ``RLENV_STORE_URL``)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import httpx

_client: httpx.Client | None = None


def _store(ctx: Any) -> tuple[httpx.Client, str]:
    global _client
    if _client is None:
        _client = httpx.Client(timeout=10.0)
    services = getattr(ctx, "services", None) or {}
    base = services.get("store") or os.environ.get("RLENV_STORE_URL", "http://127.0.0.1:8766")
    return _client, base.rstrip("/")


def _call(ctx: Any, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    client, base = _store(ctx)
    response = client.request(method, f"{base}{path}", json=body)
    if response.status_code != 200:
        raise RuntimeError(f"store backend: HTTP {response.status_code} {response.text[:200]}")
    return response.json()


def _db() -> sqlite3.Connection:
    return sqlite3.connect("orders.db")  # the rollout's copy (the tools run in its workdir)


def _order(order_id: str) -> tuple[str, str, str, int]:
    with _db() as db:
        row = db.execute(
            "SELECT order_id, customer, status, total_cents FROM orders WHERE order_id = ?",
            (order_id,),
        ).fetchone()
    if row is None:
        raise ValueError(f"no order {order_id}")
    return row


def find_order(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The order's status and total, or an error the agent reads."""
    order_id, customer, status, total = _order(arguments["order_id"])
    return {"order_id": order_id, "customer": customer, "status": status, "total_cents": total}


def _move(order_id: str, allowed: str, to: str) -> None:
    db = _db()
    try:
        db.execute(
            "UPDATE orders SET status = ? WHERE order_id = ? AND status = ?",
            (to, order_id, allowed),
        )
        db.commit()
    finally:
        db.close()


def cancel_order(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Cancel a pending order: the store releases its payment hold, then the row changes."""
    order_id, _, status, _ = _order(arguments["order_id"])
    if status != "pending":
        raise ValueError(f"order {order_id} is not pending")
    receipt = _call(ctx, "POST", "/cancellations", {"order_id": order_id})
    _move(order_id, "pending", "cancelled")
    return {"status": "cancelled", **receipt}


def refund_order(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Refund a delivered order: the store pays the total back, then the row changes."""
    order_id, _, status, total = _order(arguments["order_id"])
    if status != "delivered":
        raise ValueError(f"order {order_id} is not delivered")
    receipt = _call(ctx, "POST", "/refunds", {"order_id": order_id, "amount_cents": total})
    _move(order_id, "delivered", "refunded")
    return {"status": "refunded", **receipt}


def track_order(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Where a shipped order is (carrier, tracking number)."""
    order_id, _, status, _ = _order(arguments["order_id"])
    if status != "shipped":
        raise ValueError(f"order {order_id} is {status}, not shipped")
    result: dict[str, Any] = _call(ctx, "GET", f"/shipments/{order_id}")
    return result
