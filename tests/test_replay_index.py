"""Tool HTTP replay in process (rlenv.world.replay): how a request is keyed, what a cassette
must hold to be played, the index and its cache, and a real httpx request answered from the
index (hit, declared fallback, miss) with each outcome counted. The mutation run's fast set for
rlenv/world/replay.py; tests/test_replay.py runs the same promises through a world."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml

from rlenv.errors import FixtureMiss, SpecError
from rlenv.world.replay import (
    FixtureEvent,
    ToolIndex,
    canonical_body,
    load_index,
    load_interactions,
    lookup,
    miss_error,
    normalise_url,
    replay_cassette,
    request_key,
    serve,
)
from rlenv.world.scrub import Scrubber

API = "http://api.example.test"


def interaction(
    method: str,
    uri: str,
    body: str | None,
    answer: Any,
    *,
    content_type: str = "application/json",
    status: Any = 200,
) -> dict[str, Any]:
    return {
        "request": {
            "method": method,
            "uri": uri,
            "body": body,
            "headers": {"Content-Type": [content_type]} if body else {},
        },
        "response": {
            "status": {"code": status, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps(answer)},
        },
    }


def cassette(path: Path, *interactions: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "interactions": list(interactions)}))
    return path


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each test builds its indexes afresh (a cached index would hide how it is built)
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "cache"))


def test_urls_compare_up_to_case_default_ports_and_query_order() -> None:
    assert normalise_url("HTTP://Api.Example.TEST:80/v1/x?b=2&a=1") == f"{API}/v1/x?a=1&b=2"
    assert normalise_url("https://h.test:443") == "https://h.test/"
    assert normalise_url("https://h.test:80/p") == "https://h.test:80/p"
    assert normalise_url("http://h.test:8080/p?x=&y=1#frag") == "http://h.test:8080/p?x=&y=1"
    assert normalise_url("http://h.test/P") != normalise_url("http://h.test/p")


def test_bodies_compare_by_content() -> None:
    assert canonical_body(None) == b"" == canonical_body("") == canonical_body(b"")
    assert canonical_body('{"b": 1, "a": [1, 2]}') == b'json:{"a":[1,2],"b":1}'
    assert canonical_body(b'{"a":[1,2],"b":1}') == canonical_body(bytearray(b'{"b":1,"a":[1,2]}'))
    assert canonical_body("b=2&a=1") == b"form:a=1&b=2"
    assert canonical_body("a=1&b=two words") == b"raw:a=1&b=two words"  # a space: not a form
    assert canonical_body("a=1\nb=2") == b"raw:a=1\nb=2"
    assert canonical_body("plain text") == b"raw:plain text"
    assert canonical_body("a=") == b"form:a="
    first = b'--XYZ\r\nContent-Disposition: form-data; name="f"\r\n\r\nhello\r\n--XYZ--\r\n'
    second = first.replace(b"XYZ", b"ABC123")  # another random boundary, the same parts
    assert canonical_body(first) == canonical_body(second)
    assert canonical_body(first).startswith(b"multipart:")
    assert json.loads(canonical_body(first).removeprefix(b"multipart:")) == [
        'Content-Disposition: form-data; name="f"\r\n\r\nhello'
    ]
    assert canonical_body(first) != canonical_body(first.replace(b"hello", b"other"))


def test_the_request_key_joins_method_url_and_body() -> None:
    key = request_key("get", "http://h.test/a", None)
    expected = hashlib.sha256(b"GET\nhttp://h.test/a\n").hexdigest()
    assert key == expected
    assert (
        request_key("POST", "http://h.test/a", "x=1")
        == hashlib.sha256(b"POST\nhttp://h.test/a\nform:x=1").hexdigest()
    )
    # the separators keep a method, URL and body from running into each other
    assert request_key("GET", "http://h.test/a", "b") != request_key("GET", "http://h.test/ab", "")


def test_a_cassette_that_cannot_be_played_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("  \n")
    with pytest.raises(SpecError, match="empty.yaml: cassette cannot be read: the file is empty"):
        load_interactions(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("interactions: [" + "x" * 400)
    with pytest.raises(SpecError) as caught:
        load_interactions(broken)
    message = str(caught.value)
    assert "broken.yaml: cassette cannot be read: ParserError: " in message
    assert "\n" not in message and len(message) < len(str(broken)) + 340
    with pytest.raises(SpecError, match="cassette cannot be read: .*Error"):
        load_interactions(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda i: i["request"].update(method=None), "request needs a 'method' and a 'uri' string"),
        (lambda i: i["request"].update(body=[1]), "request.body is a list; expected a string"),
        (lambda i: i.update(response=[]), "response is a list; expected a mapping"),
        (lambda i: i["response"].pop("status"), "response.status.code is None; expected an HTTP"),
        (lambda i: i["response"].update(status=200), "response.status.code is None"),
        (lambda i: i["response"]["status"].update(code=True), "response.status.code is True"),
        (lambda i: i["response"]["status"].update(code="200"), "response.status.code is '200'"),
        (lambda i: i["response"]["status"].update(code=99), "response.status.code is 99"),
        (lambda i: i["response"]["status"].update(code=600), "response.status.code is 600"),
        (lambda i: i["response"].update(headers=["x"]), "response.headers must map names"),
        (lambda i: i["response"].update(headers={"a": 1}), "response.headers must map names"),
        (lambda i: i["response"].pop("body"), "response.body needs a 'string'"),
        (lambda i: i["response"].update(body={"text": "x"}), "response.body needs a 'string'"),
    ],
)
def test_an_unplayable_interaction_is_named(tmp_path: Path, change: Any, problem: str) -> None:
    good = interaction("GET", f"{API}/ok", None, 1)
    bad = interaction("GET", f"{API}/bad", None, 2)
    change(bad)
    path = cassette(tmp_path / "c.yaml", good, bad)
    with pytest.raises(SpecError) as caught:
        load_interactions(path)
    assert str(caught.value).startswith(f"{path}: interaction 1: {problem}")


def test_playable_edge_values(tmp_path: Path) -> None:
    edges = [
        interaction("GET", f"{API}/a", None, 1, status=100),
        interaction("GET", f"{API}/b", None, 2, status=599),
        {
            **interaction("GET", f"{API}/c", None, 3),
            "response": {"status": {"code": 204}, "body": {"string": ""}},
        },  # no headers: none
        interaction("GET", f"{API}/d", None, 4),
    ]
    edges[3]["response"]["headers"] = {"Set-Cookie": ["a", "b"], "X": "y"}
    path = cassette(tmp_path / "c.json", *edges)
    path.write_text(json.dumps({"version": 1, "interactions": edges}))  # the JSON serializer
    assert [request.uri for request, _ in load_interactions(path)] == [
        f"{API}/{name}" for name in "abcd"
    ]


def test_the_index_first_response_wins_and_secrets_are_found(tmp_path: Path) -> None:
    path = cassette(
        tmp_path / "c.yaml",
        interaction("GET", f"{API}/x?b=2&a=1", None, "first"),
        interaction("GET", f"{API}/x?a=1&b=2", None, "first"),
        interaction("GET", f"{API}/y?api_key=sk-live-0123456789abcdef", None, "keyed"),
    )
    index = ToolIndex("t", path, Scrubber()).load()
    assert len(index.responses) == 2
    hit = index.response(request_key("GET", f"{API}/x?a=1&b=2", None))
    assert hit is not None and json.loads(hit["body"]["string"]) == "first"
    assert index.response("nothing") is None
    assert index.findings and "api_key" in index.findings[0]
    # scrubbed on both sides: the request with another key hits the recorded one
    request = SimpleNamespace(
        method="GET", uri=f"{API}/y?api_key=other-secret-value", body=None, headers={}
    )
    assert json.loads(index.response(index.key_for(request))["body"]["string"]) == "keyed"
    assert ToolIndex("none", None, Scrubber()).load().responses == {}


def test_the_same_scrubbed_request_with_two_responses_is_refused(tmp_path: Path) -> None:
    path = cassette(
        tmp_path / "c.yaml",
        interaction("GET", f"{API}/z", None, 0),
        interaction("POST", f"{API}/x", '{"term": "a", "password": "REDACTED"}', 1),
        interaction("POST", f"{API}/x", '{"term": "a", "password": "REDACTED"}', 1),
        interaction("POST", f"{API}/x", '{"term": "a", "password": "other-value"}', 2),
    )
    with pytest.raises(SpecError) as caught:
        load_index(path, Scrubber())
    assert str(caught.value) == (
        f"{path}: interactions 1 and 3 differ only in scrubbed (secret-named) fields but have"
        " different responses: replay could not tell them apart; rename the field or re-record"
    )


def test_the_index_is_cached_by_the_cassette_and_a_bad_cache_is_rebuilt(tmp_path: Path) -> None:
    path = cassette(tmp_path / "c.yaml", interaction("GET", f"{API}/x", None, "v1"))
    first = load_index(path, Scrubber())
    cached = list((tmp_path / "cache" / "cassette-index").iterdir())
    assert len(cached) == 1
    assert load_index(path, Scrubber()) == first
    cached[0].write_bytes(b"")  # a torn cache file: rebuilt, not an error
    assert load_index(path, Scrubber()) == first
    cached[0].write_bytes(b"not a pickle")
    assert load_index(path, Scrubber()) == first
    cassette(path, interaction("GET", f"{API}/x", None, "v2"))  # edited: another cache entry
    second = load_index(path, Scrubber())
    assert second != first
    assert len(list((tmp_path / "cache" / "cassette-index").iterdir())) == 2
    load_index(path, Scrubber(extra_names=["term"]))  # another scrubber: its own index
    assert len(list((tmp_path / "cache" / "cassette-index").iterdir())) == 3


def _state(index: ToolIndex | None, current: str | None = "t") -> SimpleNamespace:
    return SimpleNamespace(
        indexes={} if index is None else {"t": index}, current=current, events=[]
    )


def _request(method: str, uri: str, body: str | None = None) -> SimpleNamespace:
    headers = {"content-type": ["application/json"]} if body else {}
    return SimpleNamespace(method=method, uri=uri, body=body, headers=headers)


def test_hit_fallback_and_miss_are_counted(tmp_path: Path) -> None:
    path = cassette(tmp_path / "c.yaml", interaction("POST", f"{API}/x", '{"a": 1}', "hit"))
    index = ToolIndex("t", path, Scrubber()).load()
    state = _state(index)
    response = serve(state, _request("POST", f"{API}/x", '{ "a" : 1 }'))
    assert json.loads(response["body"]["string"]) == "hit"
    with pytest.raises(FixtureMiss) as caught:
        serve(state, _request("POST", f"{API}/x?z=1", '{"a": 2}'))
    body = hashlib.sha256(b'json:{"a":2}').hexdigest()
    assert str(caught.value) == (
        f"unrecorded request for tool 't': POST {API}/x?z=1 body sha256:{body[:16]}"
        " (record it with `rlenv record`, or declare an on_miss fallback)"
    )
    assert state.events == [
        FixtureEvent("t", "hit", "POST", f"{API}/x"),
        FixtureEvent("t", "miss", "POST", f"{API}/x?z=1", body),
    ]
    index.fallback = {"body": {"answer": None}}
    outcome, response = lookup(state, _request("GET", f"{API}/other"))
    assert outcome == "fallback"
    assert response == {
        "status": {"code": 200, "message": "OK"},
        "headers": {"content-type": ["application/json"]},
        "body": {"string": b'{"answer": null}'},
    }
    index.fallback = {"body": "sorry", "status": 503}
    serve(state, _request("GET", f"{API}/other"))
    assert state.events[-1] == FixtureEvent("t", "fallback", "GET", f"{API}/other")
    outcome, response = lookup(state, _request("GET", f"{API}/other"))
    assert response == {
        "status": {"code": 503, "message": "Fallback"},
        "headers": {"content-type": ["text/plain"]},
        "body": {"string": b"sorry"},
    }
    index.fallback = {"body": "x", "status": 400}
    assert lookup(state, _request("GET", f"{API}/o"))[1]["status"]["message"] == "Fallback"
    index.fallback = {"body": "x", "status": 399}
    assert lookup(state, _request("GET", f"{API}/o"))[1]["status"]["message"] == "OK"


def test_a_tool_without_a_cassette_misses_everything() -> None:
    state = _state(None, current="nocassette")
    assert lookup(state, _request("GET", f"{API}/x")) == ("miss", None)
    with pytest.raises(FixtureMiss, match=r"tool 'nocassette': GET http://api.example.test/x \("):
        serve(state, _request("GET", "HTTP://API.example.test:80/x"))
    assert state.events == [FixtureEvent("nocassette", "miss", "GET", f"{API}/x")]
    nobody = _state(None, current=None)
    with pytest.raises(FixtureMiss, match="for tool None: GET"):
        serve(nobody, _request("GET", f"{API}/x"))
    assert nobody.events[0].tool == "?"


def test_miss_error_names_the_body_only_when_there_is_one() -> None:
    plain = miss_error("t", FixtureEvent("t", "miss", "GET", f"{API}/x"))
    assert str(plain) == (
        f"unrecorded request for tool 't': GET {API}/x"
        " (record it with `rlenv record`, or declare an on_miss fallback)"
    )


@pytest.mark.parametrize("light", [True, False])
def test_httpx_is_answered_from_the_index(tmp_path: Path, light: bool) -> None:
    path = cassette(
        tmp_path / "c.yaml",
        interaction("POST", f"{API}/v1/lookup", '{"term": "apple", "lang": "en"}', {"n": 1}),
    )
    indexes = {"t": ToolIndex("t", path, Scrubber()).load()}
    with replay_cassette(indexes, tmp_path / "placeholder.yaml", light=light) as used:
        replay = type(used)
        replay.current = "t"
        reply = httpx.post(f"{API}/v1/lookup", json={"lang": "en", "term": "apple"}, timeout=5)
        assert reply.status_code == 200 and reply.json() == {"n": 1}
        again = httpx.post(f"{API}/v1/lookup", json={"lang": "en", "term": "apple"}, timeout=5)
        assert again.json() == {"n": 1}
        with pytest.raises(FixtureMiss, match="unrecorded request for tool 't': POST"):
            httpx.post(f"{API}/v1/lookup", json={"term": "pear"}, timeout=5)
        assert [event.outcome for event in replay.events] == ["hit", "hit", "miss"]
    assert not (tmp_path / "placeholder.yaml").exists()  # never written
