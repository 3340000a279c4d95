"""The state verifiers (`sqlite_state`, `json_state`) called in process on files the test
writes: what passes, what each kind of wrong change says, the score, the diff kept in the
record and the errors that name a bad expectation. The end-to-end run through a world is
tests/test_state_verifier.py; this file is the mutation run's fast set for
rlenv/verifiers/state.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rlenv.canonical import sha256_file
from rlenv.spec import Verifier
from rlenv.verifiers.base import VerifierContext
from rlenv.verifiers.state import SHOWN, StateError, build_json, build_sqlite

SCHEMA = "CREATE TABLE orders (order_id TEXT PRIMARY KEY, status TEXT, total INTEGER)"
ROWS = (
    "INSERT INTO orders VALUES ('W1', 'pending', 10), ('W2', 'pending', 20), ('W3', 'shipped', 30)"
)
CANCEL_W1 = {"orders": {"updated": {"W1": {"status": "cancelled"}}}}


def _context(work: Path, snapshot: Path | None, name: str, data: dict[str, Any]) -> VerifierContext:
    hashes = {}
    if snapshot is not None and (snapshot / name).is_file():
        hashes = {name: sha256_file(snapshot / name)}
    return VerifierContext(
        answer="done",
        messages=[],
        input=data,
        workdir=work,
        seed=0,
        snapshot=snapshot,
        snapshot_hashes=hashes,
    )


def sqlite(
    tmp_path: Path,
    changes: list[str],
    expected: Any,
    *,
    options: dict[str, Any] | None = None,
    setup: tuple[str, ...] = (SCHEMA, ROWS),
) -> tuple[Any, ...]:
    """Grade the changes made to a copy of a snapshot database against `expected`."""
    snapshot, work = tmp_path / "snapshot", tmp_path / "work"
    snapshot.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(snapshot / "orders.db")
    for statement in setup:
        db.execute(statement)
    db.commit()
    db.close()
    shutil.copy(snapshot / "orders.db", work / "orders.db")
    db = sqlite3.connect(work / "orders.db")
    for statement in changes:
        db.execute(statement)
    db.commit()
    db.close()
    config = Verifier(
        type="sqlite_state", path="orders.db", expected_field="changes", options=options or {}
    )
    return build_sqlite(config)(_context(work, snapshot, "orders.db", {"changes": expected}))


def test_the_expected_update_passes_with_its_diff(tmp_path: Path) -> None:
    passed, score, detail, diff = sqlite(
        tmp_path, ["UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"], CANCEL_W1
    )
    assert (passed, score, detail) == (True, 1.0, None)
    assert diff["file"] == "orders.db"
    assert diff["problems"] == [] and diff["problem_count"] == 0
    assert diff["schema"] == []
    assert diff["tables"] == {
        "orders": {
            "inserted": {},
            "deleted": {},
            "updated": {"W1": {"status": ["pending", "cancelled"]}},
            "inserted_count": 0,
            "deleted_count": 0,
            "updated_count": 1,
        }
    }


def test_expected_changes_as_a_json_string_and_numbers_by_value(tmp_path: Path) -> None:
    expected = json.dumps({"orders": {"updated": {"W1": {"total": 0.0}}}})
    passed, score, detail, _ = sqlite(
        tmp_path, ["UPDATE orders SET total = 0 WHERE order_id = 'W1'"], expected
    )
    assert (passed, score, detail) == (True, 1.0, None)


def test_an_extra_change_fails_and_costs_a_share(tmp_path: Path) -> None:
    passed, score, detail, diff = sqlite(
        tmp_path,
        [
            "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'",
            "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W3'",
        ],
        CANCEL_W1,
    )
    assert passed is False and score == 0.5  # 1 expectation met of 1 + 1 unexpected
    assert detail == 'unexpected change: orders W3 updated (status "shipped" -> "cancelled")'
    assert diff["problems"] == [detail] and diff["problem_count"] == 1


def test_a_missing_change_says_unchanged(tmp_path: Path) -> None:
    passed, score, detail, _ = sqlite(tmp_path, [], CANCEL_W1)
    assert (passed, score) == (False, 0.0)
    assert detail == 'orders W1.status: expected "cancelled", found "pending" (unchanged)'


def test_a_wrong_value_says_what_it_was(tmp_path: Path) -> None:
    passed, score, detail, _ = sqlite(
        tmp_path, ["UPDATE orders SET status = 'lost' WHERE order_id = 'W1'"], CANCEL_W1
    )
    assert (passed, score) == (False, 0.0)
    assert detail == 'orders W1.status: expected "cancelled", found "lost" (was "pending")'


def test_a_wrong_column_is_both_missing_and_unexpected(tmp_path: Path) -> None:
    passed, score, detail, _ = sqlite(
        tmp_path, ["UPDATE orders SET total = 0 WHERE order_id = 'W1'"], CANCEL_W1
    )
    assert (passed, score) == (False, 0.0)
    assert detail == (
        'orders W1.status: expected "cancelled", found "pending" (unchanged); '
        "unexpected change: orders W1.total 10 -> 0"
    )


def test_an_expected_update_of_a_row_that_is_gone_or_a_column_that_is_not(
    tmp_path: Path,
) -> None:
    expected = {"orders": {"updated": {"W1": {"status": "cancelled"}, "W2": {"colour": "red"}}}}
    passed, score, detail, _ = sqlite(
        tmp_path, ["DELETE FROM orders WHERE order_id = 'W1'"], expected
    )
    assert passed is False and score == 0.0
    assert detail == (
        "orders W1: expected an updated row; it is not there; "
        "orders W2: no column 'colour'; "
        "unexpected change: orders W1 deleted"
        ' ({"order_id": "W1", "status": "pending", "total": 10})'
    )


def test_inserted_and_deleted_rows(tmp_path: Path) -> None:
    expected = {"orders": {"inserted": {"W9": {"status": "pending"}}, "deleted": ["W2"]}}
    right = [
        "INSERT INTO orders VALUES ('W9', 'pending', 90)",
        "DELETE FROM orders WHERE order_id = 'W2'",
    ]
    assert sqlite(tmp_path / "right", right, expected)[:3] == (True, 1.0, None)
    wrong = ["INSERT INTO orders VALUES ('W9', 'shipped', 90)"]
    passed, score, detail, diff = sqlite(tmp_path / "wrong", wrong, expected)
    assert (passed, score) == (False, 0.0)
    assert detail == (
        'orders W9.status (inserted): expected "pending", found "shipped"; '
        "orders W2: expected it deleted; it is still there"
    )
    assert diff["tables"]["orders"]["inserted"] == {
        "W9": {"order_id": "W9", "status": "shipped", "total": 90}
    }
    passed, _, detail, _ = sqlite(tmp_path / "none", [], {"orders": {"inserted": {"W9": None}}})
    assert passed is False
    assert detail == "orders W9: expected an inserted row; none was inserted"
    missing_column = {"orders": {"inserted": {"W9": {"colour": "red"}}}}
    _, _, detail, _ = sqlite(tmp_path / "col", right[:1], missing_column)
    assert detail == 'orders W9.colour (inserted): expected "red", found null'


def test_unexpected_inserts_and_deletes_are_named(tmp_path: Path) -> None:
    passed, score, detail, _ = sqlite(
        tmp_path,
        [
            "INSERT INTO orders VALUES ('W9', 'pending', 90)",
            "DELETE FROM orders WHERE order_id = 'W2'",
        ],
        {},
    )
    assert (passed, score) == (False, 0.0)
    assert detail == (
        "unexpected change: orders W9 inserted"
        ' ({"order_id": "W9", "status": "pending", "total": 90}); '
        "unexpected change: orders W2 deleted"
        ' ({"order_id": "W2", "status": "pending", "total": 20})'
    )


def test_nothing_expected_and_nothing_changed_passes(tmp_path: Path) -> None:
    assert sqlite(tmp_path, [], {})[:3] == (True, 1.0, None)
    config = Verifier(type="sqlite_state", path="orders.db")  # no expected at all: no change
    context = _context(tmp_path / "work", tmp_path / "snapshot", "orders.db", {})
    assert build_sqlite(config)(context)[:3] == (True, 1.0, None)


def test_a_changed_created_or_dropped_table_is_a_schema_change(tmp_path: Path) -> None:
    cancel = "UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"
    changed = [cancel, "ALTER TABLE orders ADD COLUMN note TEXT"]
    passed, score, detail, diff = sqlite(tmp_path / "a", changed, CANCEL_W1)
    assert passed is False and score == 0.0
    assert detail is not None and detail.startswith("schema: table orders changed")
    assert diff["schema"] == ["table orders changed"]
    created = [cancel, "CREATE TABLE notes (id INTEGER PRIMARY KEY)"]
    assert sqlite(tmp_path / "b", created, CANCEL_W1)[2] == "schema: table notes created"
    setup = (SCHEMA, ROWS, "CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    dropped = [cancel, "DROP TABLE notes"]
    assert (
        sqlite(tmp_path / "c", dropped, CANCEL_W1, setup=setup)[2] == "schema: table notes dropped"
    )


def test_the_same_schema_spelt_differently_is_not_a_change(tmp_path: Path) -> None:
    # sqlite keeps the CREATE text as written; whitespace is not a schema change
    setup = (
        "CREATE TABLE orders (order_id TEXT PRIMARY KEY,\n   status TEXT,  total INTEGER)",
        ROWS,
    )
    cancel = ["UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"]
    assert sqlite(tmp_path, cancel, CANCEL_W1, setup=setup)[:3] == (True, 1.0, None)


def test_a_removed_database_fails(tmp_path: Path) -> None:
    sqlite(tmp_path, [], CANCEL_W1)
    (tmp_path / "work" / "orders.db").unlink()
    config = Verifier(type="sqlite_state", path="orders.db", expected_field="changes")
    context = _context(
        tmp_path / "work", tmp_path / "snapshot", "orders.db", {"changes": CANCEL_W1}
    )
    passed, score, detail, diff = build_sqlite(config)(context)
    assert (passed, score, detail) == (False, 0.0, "schema: orders.db was removed")
    assert diff["schema"] == ["orders.db was removed"] and diff["problem_count"] == 1


def test_a_database_the_world_creates_is_all_inserts(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    db = sqlite3.connect(work / "new.db")
    db.execute(SCHEMA)
    db.execute("INSERT INTO orders VALUES ('W1', 'pending', 1)")
    db.commit()
    db.close()
    config = Verifier(type="sqlite_state", path="new.db", expected={})
    passed, _, detail, diff = build_sqlite(config)(_context(work, None, "new.db", {}))
    assert passed is False
    assert detail is not None and detail.startswith(
        "schema: table orders created; unexpected change"
    )
    assert diff["tables"]["orders"]["inserted_count"] == 1


def test_composite_keys_rowids_given_keys_and_ignored_columns(tmp_path: Path) -> None:
    composite = (
        "CREATE TABLE lines (o TEXT, n INTEGER, qty INTEGER, PRIMARY KEY (n, o))",
        "INSERT INTO lines VALUES ('W1', 1, 5), ('W1', 2, 6)",
    )
    expected = {"lines": {"updated": {"2|W1": {"qty": 7}}}}
    change = ["UPDATE lines SET qty = 7 WHERE o = 'W1' AND n = 2"]
    # the key's columns in the order the primary key names them, joined with |
    assert sqlite(tmp_path / "a", change, expected, setup=composite)[:3] == (True, 1.0, None)
    plain = (
        "CREATE TABLE log (msg TEXT, at TEXT)",
        "INSERT INTO log VALUES ('a', 't0'), ('b', 't0')",
    )
    change = ["UPDATE log SET msg = 'B' WHERE msg = 'b'"]
    by_rowid = {"log": {"updated": {"2": {"msg": "B"}}}}
    assert sqlite(tmp_path / "b", change, by_rowid, setup=plain)[:3] == (True, 1.0, None)
    by_msg = {"log": {"inserted": {"B": {}}, "deleted": ["b"]}}
    keyed = {"keys": {"log": ["msg"]}}
    assert sqlite(tmp_path / "c", change, by_msg, setup=plain, options=keyed)[:3] == (
        True,
        1.0,
        None,
    )
    stamp = ["UPDATE log SET msg = 'B', at = 't1' WHERE msg = 'b'"]
    ignored = {"ignore": {"log": ["at"]}}
    assert sqlite(tmp_path / "d", stamp, by_rowid, setup=plain, options=ignored)[:3] == (
        True,
        1.0,
        None,
    )
    passed, _, detail, _ = sqlite(tmp_path / "e", stamp, by_rowid, setup=plain)
    assert passed is False and detail == 'unexpected change: log 2.at "t0" -> "t1"'
    with pytest.raises(StateError, match="table log has no key column 'id'"):
        sqlite(tmp_path / "f", [], {}, setup=plain, options={"keys": {"log": ["id"]}})


def test_blobs_and_infinities_are_kept_as_json(tmp_path: Path) -> None:
    setup = (
        "CREATE TABLE t (k TEXT PRIMARY KEY, b BLOB, f REAL)",
        "INSERT INTO t VALUES ('a', x'00ff', 1.5)",
    )
    change = ["UPDATE t SET b = x'01', f = 9e999 WHERE k = 'a'"]
    _, _, _, diff = sqlite(
        tmp_path, change, {"t": {"updated": {"a": {"b": "x'01'", "f": "inf"}}}}, setup=setup
    )
    assert diff["problems"] == []
    assert diff["tables"]["t"]["updated"]["a"] == {"b": ["x'00ff'", "x'01'"], "f": [1.5, "inf"]}
    json.dumps(diff, allow_nan=False)  # strict JSON: a record can hold it


def test_a_long_diff_is_trimmed_with_exact_counts(tmp_path: Path) -> None:
    inserts = [f"INSERT INTO orders VALUES ('N{i:03}', 'new', {i})" for i in range(SHOWN + 12)]
    passed, score, detail, diff = sqlite(tmp_path, inserts, {})
    orders = diff["tables"]["orders"]
    assert passed is False and score == 0.0
    assert orders["inserted_count"] == SHOWN + 12 and len(orders["inserted"]) == SHOWN
    assert list(orders["inserted"])[0] == "N000"
    assert diff["problem_count"] == SHOWN + 12 and len(diff["problems"]) == SHOWN
    assert detail is not None and detail.endswith(f"; ... {SHOWN + 2} more")
    assert detail.count("unexpected change") == 10


def test_bad_expectations_and_paths_are_named_errors(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="expected changes are not JSON"):
        sqlite(tmp_path / "a", [], "{not json")
    with pytest.raises(StateError, match="expected changes: an object, got list"):
        sqlite(tmp_path / "b", [], [1])
    with pytest.raises(StateError, match="an object of updated/inserted/deleted"):
        sqlite(tmp_path / "c", [], {"orders": {"changed": {}}})
    with pytest.raises(StateError, match="an object of updated/inserted/deleted"):
        sqlite(tmp_path / "d", [], {"orders": ["W1"]})
    work = tmp_path / "work"
    by_field = Verifier(type="sqlite_state", path_field="db", expected={})
    with pytest.raises(StateError, match="leaves the workdir"):
        build_sqlite(by_field)(_context(work, None, "x", {"db": "../outside.db"}))
    with pytest.raises(StateError, match="input has no field 'db' naming the file"):
        build_sqlite(by_field)(_context(work, None, "x", {}))
    work.mkdir()
    (work / "junk.db").write_text("not a database " * 100)
    with pytest.raises(StateError, match="junk.db"):
        build_sqlite(by_field)(_context(work, None, "x", {"db": "junk.db"}))


def test_a_snapshot_rewritten_during_the_run_is_refused(tmp_path: Path) -> None:
    sqlite(tmp_path, [], {})
    snapshot = tmp_path / "snapshot"
    context = _context(tmp_path / "work", snapshot, "orders.db", {"changes": {}})
    db = sqlite3.connect(snapshot / "orders.db")  # the policy moves the baseline
    db.execute("DELETE FROM orders")
    db.commit()
    db.close()
    config = Verifier(type="sqlite_state", path="orders.db", expected_field="changes")
    with pytest.raises(StateError, match="the snapshot's orders.db changed during the run"):
        build_sqlite(config)(context)


def test_a_snapshot_file_not_pinned_is_not_the_baseline(tmp_path: Path) -> None:
    sqlite(tmp_path, [], {})
    context = _context(tmp_path / "work", tmp_path / "snapshot", "orders.db", {"changes": {}})
    context.snapshot_hashes = {}  # not there when work began: every row is new
    config = Verifier(type="sqlite_state", path="orders.db", expected_field="changes")
    passed, _, _, diff = build_sqlite(config)(context)
    assert passed is False and diff["tables"]["orders"]["inserted_count"] == 3


# ---------------------------------------------------------------------------------------------
# json_state

PROFILE = {
    "user": {"tier": "silver", "email": "a@example.com", "a/b": 1, "t~x": 2},
    "tags": ["x", "y"],
}


def json_state(
    tmp_path: Path, after: Any, expected: Any, *, before: Any = PROFILE
) -> tuple[Any, ...]:
    snapshot, work = tmp_path / "snapshot", tmp_path / "work"
    snapshot.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (snapshot / "profile.json").write_text(json.dumps(before))
    if after is not None:
        (work / "profile.json").write_text(json.dumps(after))
    config = Verifier(type="json_state", path="profile.json", expected_field="json")
    return build_json(config)(_context(work, snapshot, "profile.json", {"json": expected}))


def _with(**user: Any) -> dict[str, Any]:
    return {**PROFILE, "user": {**PROFILE["user"], **user}}


def test_json_the_expected_set_passes(tmp_path: Path) -> None:
    passed, score, detail, diff = json_state(
        tmp_path, _with(tier="gold"), {"set": {"/user/tier": "gold"}}
    )
    assert (passed, score, detail) == (True, 1.0, None)
    assert diff == {
        "file": "profile.json",
        "changed": {"/user/tier": ["silver", "gold"]},
        "changed_count": 1,
        "problems": [],
        "problem_count": 0,
    }


def test_json_unexpected_missing_and_wrong(tmp_path: Path) -> None:
    expected = {"set": {"/user/tier": "gold"}}
    passed, score, detail, _ = json_state(
        tmp_path / "a", _with(tier="gold", email="x@example.com"), expected
    )
    assert (passed, score) == (False, 0.5)
    assert detail == 'unexpected change: /user/email "a@example.com" -> "x@example.com"'
    passed, score, detail, _ = json_state(tmp_path / "b", _with(tier="bronze"), expected)
    assert (passed, score) == (False, 0.0)
    assert detail == '/user/tier: expected "gold", found "bronze"'
    gone = {**PROFILE, "user": {k: v for k, v in PROFILE["user"].items() if k != "tier"}}
    passed, _, detail, _ = json_state(tmp_path / "c", gone, expected)
    assert passed is False and detail == '/user/tier: expected "gold"; it is not there'


def test_json_escaped_pointers_lists_and_deletions(tmp_path: Path) -> None:
    after = {**_with(**{"a/b": 3, "t~x": 4}), "tags": ["x", "z"]}
    expected = {"set": {"/user/a~1b": 3, "/user/t~0x": 4, "/tags/1": "z"}}
    assert json_state(tmp_path / "a", after, expected)[:3] == (True, 1.0, None)
    deleted = {"tags": PROFILE["tags"], "user": {"tier": "silver", "a/b": 1, "t~x": 2}}
    assert json_state(tmp_path / "b", deleted, {"deleted": ["/user/email"]})[:3] == (
        True,
        1.0,
        None,
    )
    passed, _, detail, _ = json_state(tmp_path / "c", PROFILE, {"deleted": ["/user/email"]})
    assert passed is False and detail == "/user/email: expected it deleted; it is still there"
    missing_index = {"set": {"/tags/5": "q"}}
    assert (
        json_state(tmp_path / "d", PROFILE, missing_index)[2]
        == '/tags/5: expected "q"; it is not there'
    )
    not_an_index = {"set": {"/tags/x": "q"}}
    assert (
        json_state(tmp_path / "e", PROFILE, not_an_index)[2]
        == '/tags/x: expected "q"; it is not there'
    )


def test_json_a_set_object_covers_what_is_under_it_and_nothing_beside(tmp_path: Path) -> None:
    after = {
        "user": {"tier": "gold", "email": "b@example.com"},
        "username": "new",
        "tags": ["x", "y"],
    }
    expected = {"set": {"/user": {"tier": "gold", "email": "b@example.com"}}}
    passed, _, detail, _ = json_state(tmp_path, after, expected)
    assert passed is False  # /username is beside /user, not under it
    assert detail == 'unexpected change: /username null -> "new"'
    whole = {"set": {"": after}}  # the empty pointer is the whole document
    assert json_state(tmp_path / "b", after, whole)[:3] == (True, 1.0, None)


def test_json_empty_containers_are_leaves(tmp_path: Path) -> None:
    passed, _, detail, _ = json_state(tmp_path, {**PROFILE, "tags": []}, {})
    assert passed is False
    assert detail == (
        'unexpected change: /tags null -> []; unexpected change: /tags/0 "x" -> null; '
        'unexpected change: /tags/1 "y" -> null'
    )


def test_json_a_missing_file_and_bad_expectations(tmp_path: Path) -> None:
    passed, score, detail, diff = json_state(tmp_path / "a", None, {"set": {"/user/tier": "gold"}})
    assert (passed, score, detail) == (False, 0.0, "profile.json is missing")
    assert diff["file"] == "profile.json" and diff["problem_count"] == 1
    with pytest.raises(StateError, match="an object of set/deleted"):
        json_state(tmp_path / "b", PROFILE, {"put": {}})
    with pytest.raises(StateError, match="'user/tier' is not a JSON pointer"):
        json_state(tmp_path / "c", PROFILE, {"set": {"user/tier": "gold"}})
    (tmp_path / "d" / "work").mkdir(parents=True)
    (tmp_path / "d" / "work" / "profile.json").write_text("{oops")
    with pytest.raises(StateError, match="cannot read profile.json as JSON"):
        json_state(tmp_path / "d", None, {})


def test_details_show_values_as_written_with_keys_in_order(tmp_path: Path) -> None:
    setup = (
        "CREATE TABLE t (k TEXT PRIMARY KEY, b TEXT, a TEXT)",
        "INSERT INTO t VALUES ('x', 'é', 'z')",
    )
    passed, _, detail, _ = sqlite(
        tmp_path, ["INSERT INTO t VALUES ('y', 'ü', 'w')"], {}, setup=setup
    )
    assert passed is False
    assert detail == 'unexpected change: t y inserted ({"a": "w", "b": "ü", "k": "y"})'


def test_numbers_compare_by_value_and_only_with_numbers(tmp_path: Path) -> None:
    change = ["UPDATE orders SET total = 11 WHERE order_id = 'W1'"]
    passed, _, detail, _ = sqlite(
        tmp_path / "a", change, {"orders": {"updated": {"W1": {"total": 12}}}}
    )
    assert passed is False and detail == "orders W1.total: expected 12, found 11 (was 10)"
    cancel = ["UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"]
    passed, _, detail, _ = sqlite(
        tmp_path / "b", cancel, {"orders": {"updated": {"W1": {"status": 0}}}}
    )
    assert (
        passed is False
        and detail == 'orders W1.status: expected 0, found "cancelled" (was "pending")'
    )


def test_the_score_is_the_share_of_expectations_met(tmp_path: Path) -> None:
    both = {"orders": {"updated": {"W1": {"status": "cancelled"}, "W2": {"status": "cancelled"}}}}
    half = ["UPDATE orders SET status = 'cancelled' WHERE order_id = 'W1'"]
    assert sqlite(tmp_path, half, both)[:2] == (False, 0.5)


def test_json_pointer_one_past_the_end_and_a_falsy_value_still_there(tmp_path: Path) -> None:
    assert json_state(tmp_path / "a", PROFILE, {"set": {"/tags/2": "z"}})[2] == (
        '/tags/2: expected "z"; it is not there'
    )
    zero = {"n": 0, "m": ""}
    passed, _, detail, _ = json_state(tmp_path / "b", zero, {"deleted": ["/n", "/m"]}, before=zero)
    assert passed is False
    assert detail == (
        "/m: expected it deleted; it is still there; /n: expected it deleted; it is still there"
    )


def test_json_missing_file_diff_and_the_bad_expectation_message(tmp_path: Path) -> None:
    _, _, _, diff = json_state(tmp_path / "a", None, {})
    assert diff == {
        "file": "profile.json",
        "set": {},
        "deleted": [],
        "changed": {},
        "problems": ["profile.json is missing"],
        "problem_count": 1,
    }
    with pytest.raises(StateError) as caught:
        json_state(tmp_path / "b", PROFILE, {"put": {}})
    assert str(caught.value) == "expected changes: an object of set/deleted (JSON pointers)"


def test_json_a_file_the_world_creates_is_all_new(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "new.json").write_text('{"a": 1}')
    config = Verifier(type="json_state", path="new.json", expected={})
    passed, _, detail, _ = build_json(config)(_context(work, None, "new.json", {}))
    assert passed is False and detail == "unexpected change: /a null -> 1"
