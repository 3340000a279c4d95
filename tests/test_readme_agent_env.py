"""Issue 28's bar: a new agent env written from the README alone, with no workaround.

A library-loan desk, written as README "An agent env: a simulated user, tools, state" says, in
an empty directory: `rlenv init library --kind agent`, then the scaffold changed to the task (a
member who wants to borrow a book as the python user, two tools over an SQLite snapshot, rows
graded by `sqlite_state`, the reply by a judge in `record_missing` mode whose endpoint is a small
OpenAI-compatible server the env ships and `services:` starts), `rlenv record`, `rlenv validate`,
two runs with equal digests, a new policy judged live (the cassette grows, the fingerprint does
not change), and a `--set` variant. Python policies only: no torch, no network.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

from tests.conftest import cli, read_jsonl, require_tool

USERS = '''
"""The member at the desk: `user(messages, input, ctx) -> str | None`."""

STOP = "###STOP###"


def member(messages, input, ctx):
    said = next((m["content"] or "" for m in reversed(messages) if m["role"] == "assistant"), "")
    if "card" in said.lower():
        return f"My card is {input['member']}."
    if input["book_id"] in said and "lent" in said:
        return f"Thank you! {STOP}"
    return f"Never mind. {STOP}"
'''

TOOLS = '''
"""Tools over the rollout's copy of library.db: `tool(arguments, ctx) -> JSON value`."""

import sqlite3


def _db():
    return sqlite3.connect("library.db")


def find_book(arguments, ctx):
    with _db() as db:
        row = db.execute(
            "SELECT book_id, title, status FROM books WHERE title = ?", (arguments["title"],)
        ).fetchone()
    if row is None:
        raise ValueError(f"no book titled {arguments['title']!r}")
    return {"book_id": row[0], "title": row[1], "status": row[2]}


def lend_book(arguments, ctx):
    db = _db()
    try:
        row = db.execute(
            "SELECT status FROM books WHERE book_id = ?", (arguments["book_id"],)
        ).fetchone()
        if row is None or row[0] != "available":
            raise ValueError(f"book {arguments['book_id']} is not available")
        db.execute("UPDATE books SET status = 'on_loan' WHERE book_id = ?", (arguments["book_id"],))
        db.execute(
            "INSERT INTO loans (book_id, member) VALUES (?, ?)",
            (arguments["book_id"], arguments["member"]),
        )
        db.commit()
    finally:
        db.close()
    return {"book_id": arguments["book_id"], "lent_to": arguments["member"]}
'''

POLICIES = '''
"""Policies: `policy(messages, tools, ctx) -> str | message`."""

import json
import re


def _call(name, arguments, number):
    call = {"id": f"call_{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"content": None, "tool_calls": [call]}


def desk(messages, tools, ctx):
    """Asks for the card, finds the book by its title, lends it, says so."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    cards = [re.search(r"\\bM\\d+\\b", text) for text in reversed(users)]
    card = next((found for found in cards if found), None)
    if card is None:
        return "Happy to help. What is your library card number?"
    title = re.search(r'"([^"]+)"', users[0]).group(1)
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"
               if m["content"].startswith("{")]
    if not results:
        return _call("find_book", {"title": title}, 0)
    book = results[0]
    if len(results) == 1:
        if book["status"] != "available":
            return f"Sorry, {book['book_id']} is {book['status']}."
        return _call("lend_book", {"book_id": book["book_id"], "member": card.group(0)}, 1)
    return f"Done: {book['book_id']} is lent to {card.group(0)}."


def curt(messages, tools, ctx):
    return "The desk is closed."
'''

JUDGE = '''
"""A deterministic OpenAI-compatible judge (no model, no key) for the desk's replies."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_response(self, code, message=None):  # no Date header
        self.send_response_only(code, message)

    def _reply(self, payload):
        body = json.dumps(payload, sort_keys=True).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._reply({"ok": True})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rubric = request["messages"][-1]["content"]
        told = "is lent to" in rubric or "is on_loan" in rubric
        score = 5 if told else 1
        content = f"The reply {'tells' if told else 'does not tell'} what happened. score: {score}"
        self._reply({"id": "judge", "object": "chat.completion", "created": 0,
                     "model": request["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}]})


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''

SPEC = """
name: library
version: 1
seed: 7
time: "2025-06-02T09:00:00+00:00"
model: python:library_env.policies:desk
decoding: {temperature: 0.0, max_tokens: 128}
system_prompt: Ask for the member's card, find the book, lend it, and say so.
inputs: {path: ../fixtures/library/inputs.jsonl}
snapshot: {path: ../fixtures/library/snapshot}
user:
  function: library_env.users:member
  max_turns: 3
tools:
  - name: find_book
    description: Find a book by its exact title.
    parameters: {type: object, properties: {title: {type: string}}, required: [title]}
    function: library_env.tools:find_book
  - name: lend_book
    description: Lend an available book to a member.
    parameters:
      type: object
      properties: {book_id: {type: string}, member: {type: string}}
      required: [book_id, member]
    function: library_env.tools:lend_book
services:
  - {name: judge, command: [python, library_env/judge_service.py, "{port}"], ready: {http: /health}}
verifiers:
  - {name: rows, type: sqlite_state, path: library.db, expected_field: changes}
  - name: reply
    type: judge
    judge:
      model: openai:desk-judge
      base_url: http://judge.rlenv.internal/v1
      mode: record_missing
      cassette: {path: ../fixtures/library/judge.jsonl}
      scale: [1, 5]
      threshold: 0.75
      rubric: |-
        Does the desk's reply tell the member whether book {{ book_id }} was lent? Reply
        score: 1-5.
        Reply: {{ answer }}
rollouts: 2
limits: {max_turns: 8, timeout_s: 30}
"""

BOOKS = [("B1", "Dune", "available"), ("B2", "Emma", "on_loan"), ("B3", "Ulysses", "available")]


def _input(book_id: str, title: str, member: str, lent: bool) -> dict[str, Any]:
    changes = (
        {
            "books": {"updated": {book_id: {"status": "on_loan"}}},
            "loans": {"inserted": {book_id: {"member": member}}},
        }
        if lent
        else {}
    )
    prompt = f'Hello, I would like to borrow "{title}".'
    return {
        "id": f"borrow-{book_id}",
        "prompt": prompt,
        "book_id": book_id,
        "member": member,
        "changes": changes,
    }


def _write_the_library_env(root: Path) -> Path:
    """What README's agent section tells a new user to change in the scaffold."""
    package = root / "envs" / "library_env"
    for name, text in [("users", USERS), ("tools", TOOLS), ("policies", POLICIES)]:
        (package / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    (package / "service.py").unlink()  # the scaffold's store: these tools need no HTTP
    (package / "judge_service.py").write_text(textwrap.dedent(JUDGE).lstrip())
    snapshot = root / "fixtures" / "library" / "snapshot"
    for old in snapshot.iterdir():
        old.unlink()
    db = sqlite3.connect(snapshot / "library.db")
    db.execute("CREATE TABLE books (book_id TEXT PRIMARY KEY, title TEXT, status TEXT)")
    db.execute("CREATE TABLE loans (book_id TEXT PRIMARY KEY, member TEXT)")
    db.executemany("INSERT INTO books VALUES (?, ?, ?)", BOOKS)
    db.execute("INSERT INTO loans VALUES ('B2', 'M1')")
    db.commit()
    db.close()
    inputs = [
        _input("B1", "Dune", "M7", True),
        _input("B2", "Emma", "M8", False),
        _input("B3", "Ulysses", "M9", True),
    ]
    (root / "fixtures" / "library" / "inputs.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in inputs)
    )
    spec = root / "envs" / "library.yaml"
    spec.write_text(SPEC.lstrip())
    return spec


def _run(spec: Path, out: Path, *extra: str) -> dict[str, Any]:
    done = cli("run", str(spec), "--out", str(out), "--json", *extra, cwd=spec.parent.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_library_desk_from_the_readme_alone(tmp_path: Path) -> None:
    require_tool("faketime")  # `services:` run under libfaketime
    created = cli("init", "library", "--kind", "agent", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    spec = _write_the_library_env(tmp_path)
    recorded = cli("record", str(spec), cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    assert "judge:reply: 3 interactions (3 new)" in recorded.stdout, recorded.stdout
    assert "pinned inputs.sha256" in recorded.stdout and "pinned snapshot.sha256" in recorded.stdout
    validated = cli("validate", str(spec), "--json", cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    fingerprint = json.loads(validated.stdout)["fingerprint"]
    one = _run(spec, tmp_path / "one")
    two = _run(spec, tmp_path / "two")
    assert one["digest"] == two["digest"]
    assert one["counts"] == {"ok": 6} and one["pass_rate"]["value"] == 1.0
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    lent = next(r for r in records if r["input_id"] == "borrow-B1" and r["rollout"] == 0)
    assert lent["answer"] == "Done: B1 is lent to M7."
    assert [turn["content"] for turn in lent["extra"]["user_turns"]] == [
        "My card is M7.",
        "Thank you!",
    ]
    assert [call["name"] for call in lent["tool_calls"]] == ["find_book", "lend_book"]
    rows = next(v for v in lent["verifiers"] if v["name"] == "rows")
    assert rows["passed"] is True and rows["state"]["tables"]["loans"]["inserted"]
    # a new policy: its replies are judged live (record_missing), the env stays the same env
    curt = _run(spec, tmp_path / "curt", "--model", "python:library_env.policies:curt")
    assert curt["judges"]["reply"]["live_judgments"] == 3  # one per input (its book_id)
    assert curt["pass_rate"]["value"] == 0.0
    again = cli("validate", str(spec), "--json", cwd=tmp_path)
    assert json.loads(again.stdout)["fingerprint"] == fingerprint
    variant = cli("validate", str(spec), "--set", "rollouts=1", cwd=tmp_path)
    assert variant.returncode == 0, variant.stderr
