"""The scheme -> factory tables: model URIs (built in and from the `rlenv.providers` entry-point
group) and reward-model URIs."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlenv.errors import UserError
from rlenv.providers.base import ModelRequest
from rlenv.providers.registry import (
    ENTRY_POINT_GROUP,
    known_schemes,
    make_in_world_policy,
    parse_model_uri,
    resolve_provider,
)
from rlenv.rm.score import URI_FORMS, is_reward_uri, load_reward_model, reward_scheme

BUILT_IN_FORMS = "python:pkg.module:function, replay:FILE.jsonl, openai:MODEL or hf:PATH"


@pytest.mark.parametrize("uri", ["nope:x", "no-colon", "openai:", ":x"])
def test_unknown_or_malformed_model_uri_is_one_line_naming_the_forms(uri: str) -> None:
    with pytest.raises(UserError) as caught:
        resolve_provider(uri)
    assert str(caught.value) == f"--model: bad model URI {uri!r}: expected {BUILT_IN_FORMS}"


def test_built_in_schemes_resolve_lazily_to_their_providers(tmp_path: Path) -> None:
    assert known_schemes()[:4] == ["python", "replay", "openai", "hf"]
    assert parse_model_uri("openai:tiny") == ("openai", "tiny")
    provider = resolve_provider("python:tests.policies:answer")
    assert provider.in_world and provider.uri == "python:tests.policies:answer"
    replay = tmp_path / "replay.jsonl"
    replay.write_text('{"input_id": "a", "answer": "42"}\n', encoding="utf-8")
    assert resolve_provider(f"replay:{replay}").in_world
    policy = make_in_world_policy(f"replay:{replay}")
    request = ModelRequest([], [], {}, seed=0, input_id="a", rollout=0, turn=0)
    assert policy.complete_sync(request).message["content"] == "42"
    with pytest.raises(ValueError, match="not an in-world model URI"):
        make_in_world_policy("openai:tiny")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An installed distribution whose entry point adds the scheme `echo`."""
    (tmp_path / "rlenv_echo_plugin.py").write_text(
        textwrap.dedent(
            """
            from rlenv.providers.base import ModelReply
            from rlenv.providers.registry import ProviderScheme

            class Echo:
                in_world = False

                def __init__(self, uri, options):
                    self.uri, self.options = uri, options

                def identity(self):
                    return {"uri": self.uri}

                async def complete(self, request):
                    return ModelReply({"role": "assistant", "content": "echo"})

                async def aclose(self):
                    return None

            def factory(uri, rest, *, base_url, options):
                return Echo(uri, options)

            class Policy:
                def __init__(self, uri):
                    self.uri = uri

                def complete_sync(self, request):
                    return ModelReply({"role": "assistant", "content": "in-world echo"})

            scheme = ProviderScheme("echo", "echo:ANY", factory, Policy)
            """
        ),
        encoding="utf-8",
    )
    info = tmp_path / "rlenv_echo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rlenv-echo-plugin\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "echo = rlenv_echo_plugin:scheme\n"
        "bare = rlenv_echo_plugin:factory\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "echo"
    sys.modules.pop("rlenv_echo_plugin", None)


def test_entry_point_plugins_add_schemes(plugin: str) -> None:
    assert {"echo", "bare"} <= set(known_schemes())
    provider = resolve_provider("echo:anything", options={"k": 1})
    assert provider.uri == "echo:anything" and provider.options == {"k": 1}  # type: ignore[attr-defined]
    assert resolve_provider("bare:x").uri == "bare:x"
    request = ModelRequest([], [], {}, seed=0, input_id="a", rollout=0, turn=0)
    assert (
        make_in_world_policy("echo:x").complete_sync(request).message["content"] == "in-world echo"
    )
    with pytest.raises(UserError, match=r"expected .*hf:PATH.*bare:\.\.\."):
        resolve_provider("missing:x")


def test_reward_model_uri_schemes() -> None:
    assert URI_FORMS == "rm:DIR, hf-rm:DIR or http(s)://URL"
    assert reward_scheme("rm:dir")[1] == "dir"
    assert reward_scheme("https://host/score")[0] is reward_scheme("http://host")[0]
    assert [is_reward_uri(t) for t in ("hf-rm:x", "http://h", "some/dir")] == [True, True, False]
    with pytest.raises(UserError, match="bad reward model URI 'ftp://x'"):
        load_reward_model("ftp://x")
