"""A YAML cassette read an interaction at a time (rlenv.world.cassette_yaml) is read as vcrpy
reads it whole, for every shape of text: those that split and those parsed whole."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from rlenv.world.cassette_yaml import _split, deserialize
from rlenv.world.replay import load_interactions
from rlenv.world.replay_patch import import_vcr

import_vcr()

from vcr.serializers import yamlserializer  # noqa: E402


def _interaction(number: int, body: Any = None, answer: Any = None) -> dict[str, Any]:
    return {
        "request": {
            "body": body if body is not None else f'{{"term":"k{number:07d}"}}',
            "headers": {"content-type": ["application/json"], "host": ["api.invalid"]},
            "method": "POST",
            "uri": f"http://api.invalid/v1/lookup?n={number}",
        },
        "response": {
            "body": {"string": answer if answer is not None else f'{{"answer":"v{number}"}}'},
            "headers": {"content-type": ["application/json"]},
            "status": {"code": 200, "message": "OK"},
        },
    }


def _written(interactions: list[dict[str, Any]], **top: Any) -> str:
    return yamlserializer.serialize({"interactions": interactions, "version": 1, **top})  # type: ignore[no-any-return]


VARIED = [
    _interaction(0),
    _interaction(1, body=None, answer="x" * 300 + " a long line vcrpy folds " * 20),
    _interaction(2, answer="line one\n- not an item\nline three\n"),
    _interaction(3, answer=b"\x00\x01binary\xff body"),
    _interaction(4, body="caf\u00e9 \u2603 \U0001f600 'quoted' \"double\"", answer="\t tab"),
    _interaction(5, answer="- starts like an item"),
    _interaction(6, answer=""),
]

SPLIT = {
    "as vcrpy writes it": _written(VARIED),
    "one interaction": _written(VARIED[:1]),
    "with metadata": _written(VARIED[:3], metadata={"recorded": "2024-03-01"}),
    "comments and blank lines": _written(VARIED[:3]).replace("- request:", "# note\n\n- request:"),
    "crlf": _written(VARIED[:3]).replace("\n", "\r\n"),
    "no newline at the end": _written(VARIED[:2]).rstrip("\n"),
    "version first": "version: 1\n" + _written(VARIED[:2]).replace("version: 1\n", ""),
    "block scalar": (
        "interactions:\n- request:\n    body: |\n      - a line\n      another\n"
        "    headers: {}\n    method: GET\n    uri: http://a.invalid/\n"
        "  response:\n    body: {string: ok}\n    headers: {}\n"
        "    status: {code: 200, message: OK}\nversion: 1\n"
    ),
}

WHOLE = {
    "flow style": '{"interactions": [{"request": {"method": "GET"}}], "version": 1}\n',
    "items indented": "interactions:\n  - request: {method: GET}\n  - request: {method: PUT}\n"
    "version: 1\n",
    "document marker": "---\n" + _written(VARIED[:2]),
    "directive": "%YAML 1.1\n---\n" + _written(VARIED[:2]),
    "no interactions": "interactions: []\nversion: 1\n",
    "top-level sequence": "- request: {method: GET}\n- request: {method: PUT}\n",
    "items of another key": "other:\n- 1\n- 2\ninteractions: []\n",
    "a second interactions key": "interactions:\n- {a: 1}\ninteractions:\n- {b: 2}\n",
    "a tab at column 0": "interactions:\n- {a: 1}\n\t\nversion: 1\n",
}

# split, but a part does not parse alone: the whole text is parsed instead
FALLS_BACK = {
    "alias to another item": "interactions:\n- &first {request: {method: GET}}\n- *first\n"
    "version: 1\n",
    "alias to the head": "base: &b {method: GET}\ninteractions:\n- request: *b\nversion: 1\n",
    "quoted string across an item line": "interactions:\n- request: {body: 'one\n- two'}\n"
    "version: 1\n",
    "an item that is two": "interactions:\n- 1\n  - 2\nversion: 1\n",
}


@pytest.mark.parametrize("name", [*SPLIT, *WHOLE, *FALLS_BACK])
def test_read_as_vcrpy_reads_it_whole(name: str) -> None:
    text = {**SPLIT, **WHOLE, **FALLS_BACK}[name]
    try:
        expected = yamlserializer.deserialize(text)
    except Exception as whole_error:
        with pytest.raises(type(whole_error)) as raised:
            deserialize(text)
        assert str(raised.value) == str(whole_error)
        return
    assert deserialize(text) == expected
    assert (_split(text) is not None) == (name in SPLIT or name in FALLS_BACK)


def test_a_broken_item_is_the_whole_parses_error() -> None:
    text = _written(VARIED[:3]).replace("method: POST", "method: [POST", 1)
    with pytest.raises(Exception) as whole:
        yamlserializer.deserialize(text)
    with pytest.raises(type(whole.value)) as split:
        deserialize(text)
    assert str(split.value) == str(whole.value)


def test_a_cassette_of_many_interactions_peaks_at_a_fraction_of_the_whole_parse(
    tmp_path: Path,
) -> None:
    """The promise, through the reader replay uses (`load_interactions`): one item's nodes at
    a time (tracemalloc's peak: allocations, not time)."""
    path = tmp_path / "many.yaml"
    path.write_text(_written([_interaction(n) for n in range(2000)]))
    tracemalloc.start()
    whole = yamlserializer.deserialize(path.read_text())
    whole_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del whole
    tracemalloc.start()
    interactions = load_interactions(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(interactions) == 2000
    assert peak * 3 < whole_peak, (peak, whole_peak)
