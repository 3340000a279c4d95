"""`type: sqlite_state` and `type: json_state`: the world the policy left behind, graded row by
row against the changes the input expects, and nothing else changed.

The before state is the env's snapshot (checked against the hashes taken when the worker
started, so a policy that rewrote the snapshot cannot move the baseline); the after state is
the rollout's workdir. The diff (what changed, what was expected, each problem in one line) is
the verifier's ``detail`` and, structured, its result's ``state`` (the report and the browser
show it).

sqlite_state expects, per table (from the input's ``expected_field`` or ``expected``)::

    {"orders": {"updated": {"W1": {"status": "cancelled"}},   # key -> columns after
                "inserted": {"W9": {"status": "pending"}},     # key -> columns it must have
                "deleted": ["W2"]}}

A row's key is its table's primary key (a composite key's values joined with ``|``; a table
without one: its rowid), or ``options.keys: {table: [column, ...]}``. ``options.ignore:
{table: [column, ...]}`` leaves columns out of the comparison (a timestamp the tool sets).
A changed schema fails.

json_state expects JSON pointers (RFC 6901) into the file::

    {"set": {"/orders/W1/status": "cancelled"}, "deleted": ["/orders/W2"]}

and every other leaf must be as it was.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.canonical import sha256_file
from rlenv.verifiers.base import Grader, VerifierContext, expected_value

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import Verifier

SHOWN = 50  # rows (or leaves) of each kind kept in a record's diff; the counts are exact


class StateError(ValueError):
    """The expected changes or the files cannot be read: a verifier error, named."""


# ---------------------------------------------------------------------------------------------
# Where the before and after files are.


def _files(config: Verifier, context: VerifierContext) -> tuple[Path | None, Path, str]:
    relative = config.path or str(context.input.get(config.path_field or "", ""))
    if not relative:
        raise StateError(f"input has no field {config.path_field!r} naming the file")
    after = (context.workdir / relative).resolve()
    if not after.is_relative_to(context.workdir.resolve()):
        raise StateError(f"path {relative!r} leaves the workdir")
    before: Path | None = None
    if context.snapshot is not None:
        candidate = context.snapshot / relative
        pinned = context.snapshot_hashes.get(Path(relative).as_posix())
        if candidate.is_file() and pinned is not None:
            if sha256_file(candidate) != pinned:
                raise StateError(f"the snapshot's {relative} changed during the run")
            before = candidate
    return before, after, relative


def _expected(config: Verifier, context: VerifierContext) -> dict[str, Any]:
    value = expected_value(config, context)
    if value is None:
        value = {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise StateError(f"expected changes are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise StateError(f"expected changes: an object, got {type(value).__name__}")
    return value


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _verdict(
    problems: list[str], expected: int, diff: dict[str, Any]
) -> tuple[bool, float, str | None, dict[str, Any]]:
    """1/0 pass; the score is the share of expectations met, less the unexpected changes."""
    diff["problems"] = problems[:SHOWN]
    diff["problem_count"] = len(problems)
    passed = not problems
    total = max(1, expected + sum(1 for p in problems if p.startswith("unexpected")))
    met = expected - sum(1 for p in problems if not p.startswith("unexpected"))
    score = 1.0 if passed else max(0.0, met / total)
    if passed:
        return True, 1.0, None, diff
    shown = problems[:10] + ([f"... {len(problems) - 10} more"] if len(problems) > 10 else [])
    return False, score, "; ".join(shown), diff


# ---------------------------------------------------------------------------------------------
# SQLite.


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return "x'" + value.hex() + "'"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class _Table:
    def __init__(self, schema: str, columns: list[str], rows: dict[str, dict[str, Any]]) -> None:
        self.schema, self.columns, self.rows = schema, columns, rows


def _key_columns(connection: sqlite3.Connection, table: str, given: list[str] | None) -> list[str]:
    if given:
        return list(given)
    info = connection.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
    keyed = sorted((row[5], row[1]) for row in info if row[5])
    return [name for _, name in keyed]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _read_sqlite(
    path: Path | None, keys: dict[str, list[str]], *, frozen: bool
) -> dict[str, _Table]:
    """table -> its schema and rows by key (none when the file does not exist)."""
    if path is None or not path.is_file():
        return {}
    mode = "ro&immutable=1" if frozen else "ro"
    try:
        connection = sqlite3.connect(f"file:{path}?mode={mode}", uri=True)
    except sqlite3.Error as exc:
        raise StateError(f"cannot open {path.name}: {exc}") from None
    try:
        tables: dict[str, _Table] = {}
        listed = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        for name, sql in listed:
            columns = [row[1] for row in connection.execute(f"PRAGMA table_info({_quote(name)})")]
            key_columns = _key_columns(connection, name, keys.get(name))
            missing = [c for c in key_columns if c not in columns]
            if missing:
                raise StateError(f"table {name} has no key column {missing[0]!r}")
            selected = ", ".join(_quote(c) for c in columns)
            rows: dict[str, dict[str, Any]] = {}
            first = "NULL" if key_columns else "rowid"  # no key: the rowid is the row's key
            fetched = connection.execute(
                f"SELECT {first}, {selected} FROM {_quote(name)}"
            ).fetchall()
            for raw in fetched:
                row = {c: _jsonable(v) for c, v in zip(columns, raw[1:], strict=True)}
                key = "|".join(str(row[c]) for c in key_columns) if key_columns else str(raw[0])
                rows[key] = row
            tables[name] = _Table(" ".join(str(sql).split()), columns, rows)
        return tables
    except sqlite3.Error as exc:
        raise StateError(f"cannot read {path.name}: {exc}") from None
    finally:
        connection.close()


def sqlite_diff(
    before: dict[str, _Table], after: dict[str, _Table], ignore: dict[str, list[str]]
) -> dict[str, Any]:
    """What changed, per table: rows inserted and deleted (key -> row), updated (key ->
    column -> [before, after]), and tables whose schema changed, appeared or went."""
    diff: dict[str, Any] = {"tables": {}, "schema": []}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old is None or new is None or old.schema != new.schema:
            how = "created" if old is None else "dropped" if new is None else "changed"
            diff["schema"].append(f"table {name} {how}")
        old_rows = old.rows if old else {}
        new_rows = new.rows if new else {}
        skipped = set(ignore.get(name, []))
        inserted = {k: new_rows[k] for k in sorted(new_rows.keys() - old_rows.keys())}
        deleted = {k: old_rows[k] for k in sorted(old_rows.keys() - new_rows.keys())}
        updated: dict[str, dict[str, list[Any]]] = {}
        for key in sorted(old_rows.keys() & new_rows.keys()):
            a, b = old_rows[key], new_rows[key]
            changed = {
                c: [a.get(c), b.get(c)]
                for c in sorted(a.keys() | b.keys())
                if c not in skipped and a.get(c) != b.get(c)
            }
            if changed:
                updated[key] = changed
        if inserted or deleted or updated:
            diff["tables"][name] = {"inserted": inserted, "deleted": deleted, "updated": updated}
    return diff


def _same(found: Any, wanted: Any) -> bool:
    if isinstance(found, int | float) and isinstance(wanted, int | float):
        return not isinstance(found, bool) and float(found) == float(wanted)
    return bool(found == wanted)


def grade_sqlite(
    diff: dict[str, Any], after: dict[str, _Table], expected: dict[str, Any]
) -> tuple[list[str], int]:
    """The problems (one line each) and how many expectations there were."""
    problems = [f"schema: {change}" for change in diff["schema"]]
    count = 0
    covered: set[tuple[str, str, str]] = set()  # (table, kind, key) the expectation accounts for
    for table, wanted in sorted(expected.items()):
        if not isinstance(wanted, dict) or set(wanted) - {"updated", "inserted", "deleted"}:
            raise StateError(
                f"expected changes of table {table!r}: an object of updated/inserted/deleted"
            )
        changes = diff["tables"].get(table, {"inserted": {}, "deleted": {}, "updated": {}})
        rows = after[table].rows if table in after else {}
        for key, columns in sorted((wanted.get("updated") or {}).items()):
            count += 1
            key = str(key)
            covered.add((table, "updated", key))
            if key not in rows:
                problems.append(f"{table} {key}: expected an updated row; it is not there")
                continue
            changed = changes["updated"].get(key, {})
            for column, value in sorted(dict(columns).items()):
                if column not in rows[key]:
                    problems.append(f"{table} {key}: no column {column!r}")
                elif not _same(rows[key][column], value):
                    was = changed.get(column, [rows[key][column]])[0]
                    problems.append(
                        f"{table} {key}.{column}: expected {_show(value)}, found"
                        f" {_show(rows[key][column])}"
                        + ("" if column in changed else " (unchanged)")
                        + (f" (was {_show(was)})" if column in changed else "")
                    )
            for column, (was, now) in sorted(changed.items()):
                if column not in columns:
                    problems.append(
                        f"unexpected change: {table} {key}.{column} {_show(was)} -> {_show(now)}"
                    )
        for key, columns in sorted((wanted.get("inserted") or {}).items()):
            count += 1
            key = str(key)
            covered.add((table, "inserted", key))
            if key not in changes["inserted"]:
                problems.append(f"{table} {key}: expected an inserted row; none was inserted")
                continue
            row = changes["inserted"][key]
            for column, value in sorted(dict(columns or {}).items()):
                if column not in row or not _same(row[column], value):
                    problems.append(
                        f"{table} {key}.{column} (inserted): expected {_show(value)}, found"
                        f" {_show(row.get(column))}"
                    )
        for key in sorted(str(k) for k in wanted.get("deleted") or []):
            count += 1
            covered.add((table, "deleted", key))
            if key not in changes["deleted"]:
                problems.append(f"{table} {key}: expected it deleted; it is still there")
    for table, changes in sorted(diff["tables"].items()):
        for kind in ("inserted", "deleted", "updated"):
            for key, value in changes[kind].items():
                if (table, kind, key) in covered:
                    continue
                shown = (
                    ", ".join(f"{c} {_show(a)} -> {_show(b)}" for c, (a, b) in value.items())
                    if kind == "updated"
                    else _show(value)
                )
                problems.append(f"unexpected change: {table} {key} {kind} ({shown})")
    return problems, count


def _trim(diff: dict[str, Any]) -> dict[str, Any]:
    """At most SHOWN rows of each kind per table in the record, with exact counts."""
    for changes in diff["tables"].values():
        for kind in ("inserted", "deleted", "updated"):
            rows = changes[kind]
            changes[f"{kind}_count"] = len(rows)
            if len(rows) > SHOWN:
                changes[kind] = dict(list(rows.items())[:SHOWN])
    return diff


def build_sqlite(config: Verifier) -> Grader:
    keys = {str(t): list(c) for t, c in dict(config.options.get("keys") or {}).items()}
    ignore = {str(t): list(c) for t, c in dict(config.options.get("ignore") or {}).items()}

    def grade(context: VerifierContext) -> tuple[bool, float, str | None, dict[str, Any]]:
        before_path, after_path, relative = _files(config, context)
        expected = _expected(config, context)
        before = _read_sqlite(before_path, keys, frozen=True)
        after = _read_sqlite(after_path, keys, frozen=False)
        if not after_path.is_file() and before_path is not None:
            diff = {"tables": {}, "schema": [f"{relative} was removed"]}
            return _verdict([f"schema: {relative} was removed"], 1, diff)
        diff = sqlite_diff(before, after, ignore)
        problems, count = grade_sqlite(diff, after, expected)
        diff["file"] = relative
        return _verdict(problems, count, _trim(diff))

    return grade


# ---------------------------------------------------------------------------------------------
# JSON files.


def _leaves(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from _leaves(
                value[key], f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
            )
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, f"{pointer}/{index}")
    else:
        yield pointer, value


def _at(document: Any, pointer: str) -> tuple[bool, Any]:
    if pointer == "":
        return True, document
    if not pointer.startswith("/"):
        raise StateError(f"{pointer!r} is not a JSON pointer (it starts with '/')")
    node = document
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _under(pointer: str, prefix: str) -> bool:
    return pointer == prefix or pointer.startswith(prefix + "/") or prefix == ""


def _read_json(path: Path | None) -> Any:
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"cannot read {path.name} as JSON: {exc}") from None


def build_json(config: Verifier) -> Grader:
    def grade(context: VerifierContext) -> tuple[bool, float, str | None, dict[str, Any]]:
        before_path, after_path, relative = _files(config, context)
        expected = _expected(config, context)
        if set(expected) - {"set", "deleted"}:
            raise StateError("expected changes: an object of set/deleted (JSON pointers)")
        if not after_path.is_file():
            diff: dict[str, Any] = {"file": relative, "set": {}, "deleted": [], "changed": {}}
            return _verdict([f"{relative} is missing"], 1, diff)
        # no baseline file (the world created it): every leaf is new, none was "null" before
        before_file = before_path is not None and before_path.is_file()
        before = dict(_leaves(_read_json(before_path))) if before_file else {}
        after_document = _read_json(after_path)
        after = dict(_leaves(after_document))
        changed = {
            p: [before.get(p), after.get(p)]
            for p in sorted(before.keys() | after.keys())
            if p not in before or p not in after or before[p] != after[p]
        }
        problems: list[str] = []
        wanted_set = dict(expected.get("set") or {})
        wanted_deleted = [str(p) for p in expected.get("deleted") or []]
        for pointer, value in sorted(wanted_set.items()):
            found, now = _at(after_document, pointer)
            if not found:
                problems.append(f"{pointer}: expected {_show(value)}; it is not there")
            elif now != value:
                problems.append(f"{pointer}: expected {_show(value)}, found {_show(now)}")
        for pointer in sorted(wanted_deleted):
            if _at(after_document, pointer)[0]:
                problems.append(f"{pointer}: expected it deleted; it is still there")
        expected_pointers = [*wanted_set, *wanted_deleted]
        for pointer, (was, now) in changed.items():
            if not any(_under(pointer, prefix) for prefix in expected_pointers):
                problems.append(f"unexpected change: {pointer} {_show(was)} -> {_show(now)}")
        diff = {
            "file": relative,
            "changed": dict(list(changed.items())[:SHOWN]),
            "changed_count": len(changed),
        }
        return _verdict(problems, len(expected_pointers), diff)

    return grade
