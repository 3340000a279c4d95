"""Write the retail env's fixtures: the orders database (the snapshot) and the input splits.

Run from the repository root: `python envs/retail_env/make_fixtures.py`; then `rlenv pin
envs/retail.yaml`. Deterministic: the same rows and inputs every time.

The cassettes (the store's HTTP and the judge's judgments) are then recorded for the bundled
policies, held-out split first, then the train split through a `--set` variant (`rlenv record`
through a variant writes the shared cassettes but leaves their hashes in the base stale:
`rlenv pin` puts them right):

    for p in good bad null; do
      rlenv record envs/retail.yaml --model python:retail_env.policies:$p; done
    for p in good bad; do
      rlenv record envs/retail.yaml --model python:retail_env.policies:$p \
        --set inputs.path=../fixtures/retail/train_inputs.jsonl \
        --set inputs.sha256=<train_inputs.sha256> --set train_inputs=null; done
    rlenv pin envs/retail.yaml
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "retail"
CUSTOMERS = ["ana", "ben", "chloe", "dev", "eli", "fay", "gus", "hana", "ivo", "jun"]


def orders() -> list[tuple[str, str, str, int]]:
    """(order_id, customer, status, total_cents): pending orders can be cancelled, delivered
    ones refunded, shipped ones neither."""
    statuses = ["pending", "delivered", "shipped"]
    return [
        (f"O{1000 + n}", CUSTOMERS[n % len(CUSTOMERS)], statuses[n % 3], 1000 + 250 * n)
        for n in range(30)
    ]


def task(order: tuple[str, str, str, int]) -> dict[str, object]:
    order_id, customer, status, _ = order
    if status == "shipped":  # the customer asks where it is: nothing may change
        return {
            "id": f"track-{order_id}",
            "prompt": f"Hi, this is {customer}. Where is my order?",
            "order_id": order_id,
            "user_instructions": f"You are {customer}. You want to know where order {order_id} is.",
            "changes": {},
        }
    intent = "cancel" if status == "pending" else "refund"
    after = "cancelled" if intent == "cancel" else "refunded"
    return {
        "id": f"{intent}-{order_id}",
        "prompt": f"Hi, this is {customer}. I would like to {intent} one of my orders.",
        "order_id": order_id,
        "user_instructions": f"You are {customer}. You want to {intent} order {order_id}.",
        "changes": {"orders": {"updated": {order_id: {"status": after}}}},
    }


def main() -> None:
    snapshot = ROOT / "snapshot"
    snapshot.mkdir(parents=True, exist_ok=True)
    database = snapshot / "orders.db"
    database.unlink(missing_ok=True)
    db = sqlite3.connect(database)
    db.execute(
        "CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer TEXT, status TEXT,"
        " total_cents INTEGER)"
    )
    db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders())
    db.commit()
    db.close()
    tasks = [task(order) for order in orders()]
    # disjoint (train never sees a held-out order), each with all three intents
    held_out, train = tasks[::2], tasks[1::2]
    for name, rows in (("inputs.jsonl", held_out), ("train_inputs.jsonl", train)):
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        (ROOT / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
