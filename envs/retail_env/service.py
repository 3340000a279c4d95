"""The retail env's store backend: payments and shipping, a small deterministic HTTP service.

`rlenv record envs/retail.yaml` starts it from the spec's `services:` block (under the frozen
clock, on a free port) and the retail tools reach it at `http://store.rlenv.internal`; the
cassette keeps what it answered, so running the env never needs it. Stateless and
deterministic: the same request gives the same bytes (ids are hashes of the request; no Date
header).

    python envs/retail_env/service.py --port PORT

Endpoints: GET /health; POST /refunds {"order_id", "amount_cents"} -> {"refund_id", ...};
POST /cancellations {"order_id"} -> {"cancellation_id", ...}; GET /shipments/<order_id>.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from http_json import JSONHandler, serve  # beside this file: run as a script by `services:`

MAX_BODY_BYTES = 16 * 1024
CARRIERS = ["parcelpost", "swiftship", "northline"]


def _id(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256("|".join(str(part) for part in parts).encode()).hexdigest()
    return f"{prefix}_{digest[:12]}"


def refund(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    order_id, amount = body.get("order_id"), body.get("amount_cents")
    if not isinstance(order_id, str) or not isinstance(amount, int) or amount <= 0:
        return 400, {"error": "a refund needs order_id (string) and amount_cents (> 0)"}
    return 200, {
        "refund_id": _id("rf", order_id, amount),
        "order_id": order_id,
        "amount_cents": amount,
        "status": "succeeded",
    }


def cancellation(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    order_id = body.get("order_id")
    if not isinstance(order_id, str):
        return 400, {"error": "a cancellation needs order_id (string)"}
    return 200, {
        "cancellation_id": _id("cx", order_id),
        "order_id": order_id,
        "payment_hold": "released",
    }


def shipment(order_id: str) -> tuple[int, dict[str, Any]]:
    number = int(hashlib.sha256(order_id.encode()).hexdigest()[:8], 16)
    return 200, {
        "order_id": order_id,
        "carrier": CARRIERS[number % len(CARRIERS)],
        "tracking": _id("tr", order_id),
        "days_in_transit": 1 + number % 5,
    }


class Handler(JSONHandler):
    server_version = "retail-store/1"
    max_body_bytes = MAX_BODY_BYTES

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, {"ok": True})
        elif self.path.startswith("/shipments/"):
            self._reply(*shipment(self.path.removeprefix("/shipments/")))
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        body = self._json_body()
        if body is None:
            return
        routes = {"/refunds": refund, "/cancellations": cancellation}
        route = routes.get(self.path)
        if route is None or not isinstance(body, dict):
            self._reply(404, {"error": f"no route {self.path}"})
            return
        self._reply(*route(body))


def main(argv: list[str] | None = None) -> int:
    return serve(Handler, "The retail env's store backend.", 8766, argv)


if __name__ == "__main__":
    sys.exit(main())
