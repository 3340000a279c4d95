"""`rlenv run` starts the sandbox probe in a thread while it loads the spec
(`probe_mechanism_soon`); `probe_mechanism` then takes that probe's answer, never a second one
made beside it, and a forced mechanism starts no probe at all."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rlenv.sandbox import run as sandbox_run


class _WatchedLock:
    """The probe lock, saying when a second caller had to wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waited = threading.Event()

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.waited.set()
            self.lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty probe cache, restored to an empty one (a later call probes the host again)."""
    monkeypatch.delenv("RLENV_SANDBOX", raising=False)
    sandbox_run._probed_mechanism.cache_clear()
    yield
    sandbox_run._probed_mechanism.cache_clear()


def test_probe_mechanism_waits_for_the_probe_in_flight(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    second = threading.Event()
    calls: list[str] = []

    def works(mechanism: str) -> bool:
        calls.append(threading.current_thread().name)
        if threading.current_thread().name != "rlenv-sandbox-probe":
            second.set()
        elif len(calls) == 1:  # the background probe: held until the second caller came
            entered.set()
            release.wait(30)
        return mechanism == "unshare"

    lock = _WatchedLock()
    monkeypatch.setattr(sandbox_run, "_mechanism_works", works)
    monkeypatch.setattr(sandbox_run, "_PROBING", lock)
    sandbox_run.probe_mechanism_soon()
    assert entered.wait(30)
    found: list[str] = []
    caller = threading.Thread(target=lambda: found.append(sandbox_run.probe_mechanism()))
    caller.start()
    # either it waits for the probe in flight (right) or it probes again itself (wrong)
    while not (lock.waited.wait(0.01) or second.is_set()):
        pass
    release.set()
    caller.join(30)
    assert not second.is_set(), "probe_mechanism probed again beside the probe in flight"
    assert found == ["unshare"]
    assert calls == ["rlenv-sandbox-probe", "rlenv-sandbox-probe"]  # bwrap, then unshare
    sandbox_run.probe_mechanism_soon()  # probed already: no thread, no probe
    assert len(calls) == 2


def test_a_forced_mechanism_starts_no_probe(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLENV_SANDBOX", "rlimits")
    monkeypatch.setattr(sandbox_run, "_mechanism_works", lambda mechanism: pytest.fail("probed"))
    before = threading.active_count()
    sandbox_run.probe_mechanism_soon()
    assert threading.active_count() == before
    assert sandbox_run.probe_mechanism() == "rlimits"


def test_a_probe_that_fails_in_the_thread_is_made_again_where_it_is_asked_for(
    fresh_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error in the background probe stays there (no thread traceback); the caller probes
    again and gets the answer, or the error, itself."""
    answers = iter([RuntimeError("probe broke"), True])

    def works(mechanism: str) -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(sandbox_run, "_mechanism_works", works)
    seen: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    sandbox_run.probe_mechanism_soon()
    for thread in threading.enumerate():
        if thread.name == "rlenv-sandbox-probe":
            thread.join(30)
    assert seen == []
    assert sandbox_run.probe_mechanism() == "bwrap"
