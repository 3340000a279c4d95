"""Tool replay in process (rlenv.world.replay), the parts mutmut found untested: which indexes
a spec gets (tools, fallbacks, MCP tools, a model user's cassette), how a request's content
type decides what is scrubbed from its key, and what each served request is counted as.
In the fast set of rlenv/world/replay.py (bench/mutants.py) beside tests/test_replay_index.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from rlenv.errors import FixtureMiss
from rlenv.spec import Tool
from rlenv.spec_user import USER_CASSETTE, SimulatedUser
from rlenv.world.replay import (
    FixtureEvent,
    ToolIndex,
    make_replay_cassette_class,
    replay_cassette,
    request_key,
    served,
    spec_indexes,
)
from rlenv.world.scrub import Scrubber
from tests.test_replay_index import API, cassette, interaction


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "cache"))


class Loaded:
    """What spec_indexes reads of a LoadedSpec: its tools, its user, paths from its root."""

    def __init__(self, root: Path, tools: list[Tool], user: SimulatedUser | None = None) -> None:
        self.root = root
        self.spec = SimpleNamespace(tools=tools, user=user)

    def resolve(self, path: str) -> Path:
        return self.root / path

    def cassette_path(self, tool: Tool) -> Path | None:
        return self.resolve(tool.cassette.path) if tool.cassette else None


def test_spec_indexes_every_http_tool_and_a_model_users_cassette(tmp_path: Path) -> None:
    cassette(tmp_path / "a.yaml", interaction("GET", f"{API}/a", None, "from a"))
    cassette(tmp_path / "user.yaml", interaction("POST", f"{API}/chat", '{"q": 1}', "hi"))
    tools = [
        Tool(name="a", function="m:a", cassette={"path": "a.yaml"}),
        Tool(name="b", function="m:b", on_miss={"status": 404, "body": {"none": True}}),
        Tool(name="mcp", mcp={"url": "http://mcp.test/"}, cassette={"path": "mcp.jsonl"}),
    ]
    user = SimulatedUser(
        model="openai:u", base_url="http://u.test/v1", cassette={"path": "user.yaml"}
    )
    indexes = spec_indexes(Loaded(tmp_path, tools, user), Scrubber())  # type: ignore[arg-type]
    assert sorted(indexes) == ["a", "b", USER_CASSETTE]  # an MCP tool's cassette is not HTTP
    a, b, replies = indexes["a"], indexes["b"], indexes[USER_CASSETTE]
    assert (a.name, a.path, a.fallback) == ("a", tmp_path / "a.yaml", None)
    hit = a.response(request_key("GET", f"{API}/a", None))
    assert hit is not None and json.loads(hit["body"]["string"]) == "from a"
    assert (b.name, b.path, b.responses) == ("b", None, {})
    assert b.fallback == {"status": 404, "body": {"none": True}}
    assert (replies.name, replies.path, replies.fallback) == (
        USER_CASSETTE,
        tmp_path / "user.yaml",
        None,
    )
    assert replies.response(request_key("POST", f"{API}/chat", '{"q":1}')) is not None
    # a user without a model (no cassette), or none at all: no user index
    turns = SimulatedUser(turns=["hello"])
    assert sorted(spec_indexes(Loaded(tmp_path, tools, turns), Scrubber())) == ["a", "b"]  # type: ignore[arg-type]
    assert sorted(spec_indexes(Loaded(tmp_path, tools), Scrubber())) == ["a", "b"]  # type: ignore[arg-type]


FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": [FORM]},
        {"content-type": FORM},
        {"CONTENT-TYPE": [FORM, "ignored"]},
        {"Accept": "*/*", "Content-Type": FORM},
    ],
)
def test_the_declared_content_type_decides_what_is_scrubbed(headers: dict[str, Any]) -> None:
    """A form body with a space is a form only because its header says so: its password is
    then scrubbed from the key, so another password hits the recorded request."""
    index = ToolIndex("t", None, Scrubber())
    recorded = SimpleNamespace(
        method="POST", uri=f"{API}/login", body="q=two words&password=hunter2", headers=headers
    )
    other = SimpleNamespace(**{**vars(recorded), "body": "q=two words&password=letmein"})
    url, body = index.scrubbed(recorded)
    assert url == f"{API}/login"
    assert body is not None and "hunter2" not in str(body)
    assert index.key_for(recorded) == index.key_for(other)
    unlabeled = SimpleNamespace(**{**vars(recorded), "headers": {}})
    assert index.scrubbed(unlabeled)[1] == recorded.body  # no header: raw text, kept
    assert ToolIndex("t", None, Scrubber()).key_for(unlabeled) != index.key_for(
        SimpleNamespace(**{**vars(other), "headers": {}})
    )


def test_a_request_without_headers_is_keyed_by_its_scrubbed_url() -> None:
    index = ToolIndex("t", None, Scrubber())
    request = SimpleNamespace(method="GET", uri=f"{API}/x?api_key=sk-abcdef123456", body=None)
    request.headers = None
    url, body = index.scrubbed(request)
    assert "sk-abcdef123456" not in url and body is None


def test_a_miss_event_names_the_scrubbed_url_and_the_body_digest() -> None:
    index = ToolIndex("tool", None, Scrubber())
    request = SimpleNamespace(
        method="POST",
        uri="HTTP://API.example.test:80/x?b=1&api_key=sk-abcdef123456",
        body='{"b": 1, "a": 2}',
        headers={"Content-Type": "application/json"},
    )
    event = index.event("miss", request)
    assert (event.tool, event.outcome, event.method) == ("tool", "miss", "POST")
    assert event.url.startswith(f"{API}/x?") and "sk-abcdef123456" not in event.url
    assert event.body_sha256 == hashlib.sha256(b'json:{"a":2,"b":1}').hexdigest()
    bodiless = SimpleNamespace(method="GET", uri=f"{API}/x", body=None, headers={})
    assert index.event("miss", bodiless) == FixtureEvent("tool", "miss", "GET", f"{API}/x", "")


def test_a_served_request_is_counted_under_its_tool() -> None:
    state = SimpleNamespace(current="t", events=[])
    served(state, "hit", SimpleNamespace(method="GET", uri=f"{API}/x?b=1"))
    state.current = None
    served(state, "fallback", SimpleNamespace(method="POST", uri=f"{API}/y"))
    assert state.events == [
        FixtureEvent("t", "hit", "GET", f"{API}/x?b=1"),
        FixtureEvent("?", "fallback", "POST", f"{API}/y"),
    ]


def test_the_replay_cassette_never_records_and_keys_each_request_once(tmp_path: Path) -> None:
    from vcr.record_mode import RecordMode

    path = cassette(tmp_path / "c.yaml", interaction("GET", f"{API}/x", None, {"n": 1}))
    replay = make_replay_cassette_class()
    replay.indexes = {"t": ToolIndex("t", path, Scrubber()).load()}
    replay.current = "t"
    replay.events = []
    used = replay(str(tmp_path / "placeholder.yaml"))
    assert used.record_mode == RecordMode.NONE
    hit = SimpleNamespace(method="GET", uri=f"{API}/x", body=None, headers={})
    gone = SimpleNamespace(method="GET", uri=f"{API}/gone", body=None, headers={})
    assert hit in used and gone not in used
    assert used.can_play_response_for(hit) is True
    assert json.loads(used.play_response(hit)["body"]["string"]) == {"n": 1}
    with pytest.raises(FixtureMiss, match="unrecorded request for tool 't': GET"):
        used.can_play_response_for(gone)
    assert [event.outcome for event in replay.events] == ["hit", "miss"]
    # the second question about one request reuses the first lookup: the index is not asked
    assert hit in used
    replay.indexes = {}
    assert hit in used and used.can_play_response_for(hit)
    assert json.loads(used.play_response(hit)["body"]["string"]) == {"n": 1}
    fresh = SimpleNamespace(**vars(hit))
    assert fresh not in used  # another request object: looked up again, in the empty index
    used._save(force=True)
    assert not (tmp_path / "placeholder.yaml").exists()


def test_a_heavy_replay_answers_through_vcrpy(tmp_path: Path) -> None:
    path = cassette(tmp_path / "c.yaml", interaction("GET", f"{API}/x", None, {"n": 2}))
    indexes = {"t": ToolIndex("t", path, Scrubber()).load()}
    with replay_cassette(indexes, tmp_path / "p.yaml", light=False) as used:
        type(used).current = "t"
        assert httpx.get(f"{API}/x", timeout=5).json() == {"n": 2}
        with pytest.raises(FixtureMiss):
            httpx.get(f"{API}/y", timeout=5)
        assert [(e.outcome, e.url) for e in type(used).events] == [
            ("hit", f"{API}/x"),
            ("miss", f"{API}/y"),
        ]


def test_bodies_that_are_not_utf8_or_loose_forms_still_key() -> None:
    from rlenv.world.replay import canonical_body

    assert canonical_body(b"caf\xe9 au lait") == b"raw:caf\xe9 au lait"  # read, kept as sent
    assert canonical_body("a=1&b") == b"form:a=1&b="  # a pair without "=": not strict
    part = b'--B\r\nContent-Disposition: form-data; name="f"\r\n\r\nX caf\xe9 X\r\n--B--\r\n'
    assert json.loads(canonical_body(part).removeprefix(b"multipart:")) == [
        'Content-Disposition: form-data; name="f"\r\n\r\nX caf\ufffd X'
    ]


def test_a_declared_fallback_body_is_sorted_json() -> None:
    from rlenv.world.replay import lookup

    index = ToolIndex("t", None, Scrubber(), fallback={"body": {"b": 1, "a": 2}})
    state = SimpleNamespace(indexes={"t": index}, current="t", events=[])
    request = SimpleNamespace(method="GET", uri=f"{API}/x", body=None, headers={})
    assert lookup(state, request)[1]["body"]["string"] == b'{"a": 2, "b": 1}'
    index.fallback = None
    assert lookup(state, request) == ("miss", None)  # a cassette without it: a miss


def test_a_json_cassette_is_read_as_json(tmp_path: Path) -> None:
    from rlenv.world.replay import load_interactions

    path = tmp_path / "c.json"  # tab-indented: JSON, never YAML
    document = {"version": 1, "interactions": [interaction("GET", f"{API}/a", None, 1)]}
    path.write_text(json.dumps(document, indent="\t"))
    assert [request.uri for request, _ in load_interactions(path)] == [f"{API}/a"]


def test_an_unreadable_cassette_is_named_in_one_line(tmp_path: Path) -> None:
    from rlenv.errors import SpecError
    from rlenv.world.replay import load_interactions

    empty = tmp_path / "empty.yaml"
    empty.write_text("\n")
    with pytest.raises(SpecError) as caught:
        load_interactions(empty)
    assert str(caught.value) == (
        f"{empty}: cassette cannot be read: the file is empty (no recorded interactions);"
        " write it with `rlenv record`"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("interactions: [" + "x" * 400)
    with pytest.raises(SpecError) as caught:
        load_interactions(broken)
    text = str(caught.value).split(": cassette cannot be read: ", 1)[1]
    assert text.startswith("ParserError: while parsing a flow sequence in")  # the error, one line
    assert text == " ".join(text.split()) and "XX" not in text


def test_an_mcp_tool_first_does_not_hide_the_others(tmp_path: Path) -> None:
    cassette(tmp_path / "a.yaml", interaction("GET", f"{API}/a", None, "from a"))
    tools = [
        Tool(name="mcp", mcp={"url": "http://mcp.test/"}, cassette={"path": "mcp.jsonl"}),
        Tool(name="a", function="m:a", cassette={"path": "a.yaml"}),
    ]
    assert sorted(spec_indexes(Loaded(tmp_path, tools), Scrubber())) == ["a"]  # type: ignore[arg-type]
