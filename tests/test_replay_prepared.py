"""What a frozen-world worker builds before it forks the template every rollout's child is
forked from, so that no child builds it again (issue 30: per rollout, CPU and copied pages)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rlenv.spec import Tool
from rlenv.world.replay import spec_indexes
from rlenv.world.scrub import Scrubber
from tests.test_mutants_replay import Loaded
from tests.test_replay_index import API, cassette, interaction


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "cache"))


def test_the_scrubbers_value_patterns_are_built_with_the_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request a tool makes is scrubbed to be keyed; the secrets in play are searched
    by two regular expressions, which each rollout's child compiled again (1,100 of its 1,800
    Python calls, for one tool call) when the worker had not built them first."""
    cassette(tmp_path / "a.yaml", interaction("GET", f"{API}/a", None, "from a"))
    tools = [Tool(name="a", function="m:a", cassette={"path": "a.yaml"})]
    spec_indexes(Loaded(tmp_path, tools), Scrubber())  # type: ignore[arg-type]
    # as a worker loads them: from the index cache, no request scrubbed on the way
    scrubber = Scrubber(known=["sk-live-0123456789abcdef"])
    spec_indexes(Loaded(tmp_path, tools), scrubber)  # type: ignore[arg-type]

    def compiled(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a pattern compiled after the indexes were loaded: {args[0]!r}")

    monkeypatch.setattr(re, "compile", compiled)
    secret = "sk-live-0123456789abcdef"
    assert scrubber.redact_seen(f"{API}/a?t={secret}") == f"{API}/a?t=REDACTED"
    assert scrubber.values.data(f"token {secret}".encode()) == b"token REDACTED"
