"""A cassette index's responses held packed (rlenv.world.packed, issue 30's peak memory): the
mapping a dict was (hit, miss, length, keys, pickled into the index cache), in a fraction of
its memory in every frozen-world worker."""

from __future__ import annotations

import hashlib
import json
import pickle
import tracemalloc
from pathlib import Path

import pytest
import yaml

from rlenv.world.packed import PackedResponses
from rlenv.world.replay import ToolIndex, load_index, request_key
from rlenv.world.scrub import Scrubber


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "cache"))


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_packed_responses_are_the_mapping_they_were_made_from() -> None:
    made = {_key(str(n)): f"response {n}".encode() * (n % 3) for n in range(50)}
    packed = PackedResponses(made)
    assert len(packed) == 50
    assert dict(packed) == made and packed == made
    assert sorted(packed) == sorted(made)
    for key, value in made.items():
        assert packed[key] == value and packed.get(key) == value and key in packed
    for absent in (_key("absent"), "nothing", _key("0").upper(), "", 3, None):
        assert packed.get(absent) is None and absent not in packed
    with pytest.raises(KeyError):
        packed[_key("absent")]
    again = pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(again, PackedResponses) and dict(again) == made
    assert len(PackedResponses()) == 0 and PackedResponses().get(_key("0")) is None
    with pytest.raises(ValueError, match="not a request key"):
        PackedResponses({"nothing": b""})


def _cassette(path: Path, count: int) -> Path:
    interactions = [
        {
            "request": {
                "method": "POST",
                "uri": "http://lookup.test/v1",
                "body": json.dumps({"term": f"k{n:07d}"}),
                "headers": {"Content-Type": ["application/json"]},
            },
            "response": {
                "status": {"code": 200, "message": "OK"},
                "headers": {"Content-Type": ["application/json"]},
                "body": {"string": json.dumps({"answer": f"v{n:07d}"})},
            },
        }
        for n in range(count)
    ]
    path.write_text(yaml.safe_dump({"version": 1, "interactions": interactions}))
    return path


def test_a_loaded_index_holds_its_responses_in_a_few_objects(tmp_path: Path) -> None:
    """Loaded from the cache (as every worker loads it), 2,000 interactions' responses take
    less than 210 bytes each (each one is ~150 bytes pickled); as a dict of a key string and
    a bytes object per interaction they took ~320."""
    count = 2000
    path = _cassette(tmp_path / "c.yaml", count)
    load_index(path, Scrubber())  # builds the cache
    tracemalloc.start()
    try:
        index = ToolIndex("t", path, Scrubber()).load()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(index.responses) == count
    assert held < 210 * count, held / count
    hit = index.response(request_key("POST", "http://lookup.test/v1", '{"term": "k0001234"}'))
    assert hit is not None and json.loads(hit["body"]["string"]) == {"answer": "v0001234"}
