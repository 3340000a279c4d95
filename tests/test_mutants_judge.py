"""The judge's parts mutmut found untested (rlenv.verifiers.judge): a live judge reached at a
service's logical URL is started from `services:` at the first judgment (under the frozen
clock), reached at its real port, kept for the next judgment and stopped when the writer
closes; another URL is left as it is. In the fast set of rlenv/verifiers/judge.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from rlenv.verifiers.judge import Judges, JudgeServices, judging_writer
from tests.test_judge_parts import loaded_spec, pending

ROOT = Path(__file__).resolve().parents[1]
JUDGE_URL = "http://judge.rlenv.internal/v1"
SERVICE = {
    "name": "judge",
    "command": [sys.executable, "-m", "tests.chat_server", "--port", "{port}"],
    "env": {"PYTHONPATH": str(ROOT)},
}


def _served_spec(root: Path) -> Any:
    import yaml

    from rlenv.spec import load_spec

    loaded = loaded_spec(root, "live", cassette=None, base_url=JUDGE_URL)
    document = yaml.safe_load(loaded.path.read_text())
    document["services"] = [SERVICE]
    loaded.path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_spec(loaded.path)


def _open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, int(port))) == 0


def test_other_urls_are_reached_as_they_are(tmp_path: Path) -> None:
    services = JudgeServices(_served_spec(tmp_path / "env"))
    assert services.reachable(None) is None
    assert services.reachable("") == ""
    assert services.reachable("http://judge.example.test/v1") == "http://judge.example.test/v1"
    assert services.reachable("http://other.rlenv.internal/v1") == "http://other.rlenv.internal/v1"
    assert services.routes == {}  # nothing started
    services.stop()  # nothing to stop


def test_a_judge_service_is_started_at_first_use_and_stopped_with_the_writer(
    tmp_path: Path,
) -> None:
    loaded = _served_spec(tmp_path / "env")

    class Writer:
        def __init__(self) -> None:
            self.written: list[dict[str, Any]] = []

        def write(self, record: dict[str, Any]) -> None:
            self.written.append(record)

        def close(self) -> None:
            pass

    inputs = [type("Input", (), {"id": "a", "data": {"gold": "apple"}})()]
    writer = judging_writer(loaded, inputs, Writer(), tmp_path)
    judges: Judges = writer.judges
    services = judges.services
    assert services.routes == {}
    writer.write(pending("apple"))
    judged = writer.writer.written[0]["verifiers"][0]
    assert (judged["passed"], judged["score"]) == (True, 0.8)
    assert judged["detail"].startswith("judge score 8 (of 0-10): echo: Grade apple")
    address = services.routes["judge.rlenv.internal"]
    assert address.startswith("127.0.0.1:") and _open(address)
    # the host compares case-blind; the path and query stay; no second start
    assert services.reachable("http://JUDGE.rlenv.internal/v1?x=1") == f"http://{address}/v1?x=1"
    writer.write(pending("pear", exact=False))
    assert services.routes == {"judge.rlenv.internal": address}
    assert judges.counts == {"judged": {"live": 2, "replayed": 0}}
    writer.close()
    assert services.routes == {} and not _open(address)


def test_a_judge_service_needs_the_frozen_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlenv import sandbox
    from rlenv.errors import RunFailed

    services = JudgeServices(_served_spec(tmp_path / "env"))
    monkeypatch.setattr(sandbox, "faketime_env", lambda *args, **kwargs: {})
    with pytest.raises(RunFailed) as caught:
        services.reachable(JUDGE_URL)
    assert str(caught.value) == (
        "libfaketime is not installed: the judge service 'judge' runs under its frozen clock"
        " (Debian/Ubuntu: apt-get install faketime)"
    )
    assert services.routes == {}
