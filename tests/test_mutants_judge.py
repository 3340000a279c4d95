"""The judge's parts mutmut found untested (rlenv.verifiers.judge): a live judge reached at a
service's logical URL is started from `services:` at the first judgment (under the frozen
clock), reached at its real port, kept for the next judgment and stopped when the writer
closes; another URL is left as it is. In the fast set of rlenv/verifiers/judge.py."""

from __future__ import annotations

import dataclasses
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


CLOCK_JUDGE = """
import json, sys
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer


class Judge(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        now = datetime.now(UTC).isoformat()
        body = json.dumps({"choices": [{"message": {"content": f"score: 8 at {now}"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Judge).serve_forever()
"""


def test_a_judge_service_runs_on_the_stopped_spec_clock(tmp_path: Path) -> None:
    """Its clock stands at the spec's instant (a ticking clock would put a judgment's time,
    and so a reply that mentions it, on the wall)."""
    import yaml

    from rlenv.spec import load_spec

    loaded = loaded_spec(tmp_path / "env", "live", cassette=None, base_url=JUDGE_URL)
    (loaded.root / "clock_judge.py").write_text(CLOCK_JUDGE)
    document = yaml.safe_load(loaded.path.read_text())
    document["services"] = [
        {"name": "judge", "command": [sys.executable, "clock_judge.py", "{port}"]}
    ]
    loaded.path.write_text(yaml.safe_dump(document, sort_keys=False))
    judges = Judges(load_spec(loaded.path), {"a": {"gold": "apple"}}, None)
    try:
        first = judges.settle(pending("apple"))["verifiers"][0]["detail"]
        second = judges.settle(pending("pear", exact=False))["verifiers"][0]["detail"]
    finally:
        judges.services.stop()
    assert first.endswith("score: 8 at 2024-03-01T12:00:00+00:00"), first
    assert second.endswith("score: 8 at 2024-03-01T12:00:00+00:00"), second


def test_a_cassette_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    import re

    from rlenv.errors import UserError
    from rlenv.verifiers.judge import load_cassette

    path = tmp_path / "judge.jsonl"
    path.write_bytes(b'{"key": "k", "reply": "\xff"}\n')
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: cannot read the judge"):
        load_cassette(path)


def test_a_recorded_exchange_is_one_sorted_line(tmp_path: Path, chat: Any) -> None:
    import json

    from rlenv.verifiers import judge as judging
    from tests.test_judge_parts import context, verifier

    server = chat()
    saved = dataclasses.replace(judging.MODE)
    judging.configure(
        live=True, spec_root=tmp_path, record_dir=tmp_path, base_url=server.base_url + "/v1"
    )
    try:
        judging.build(verifier())(context("apple"))
    finally:
        judging.MODE.__dict__.update(saved.__dict__)  # all of it: a dead base_url left behind
        # made a later test's live judge (same process) call a closed server
    line = (tmp_path / "judge-judged.jsonl").read_text()
    entry = json.loads(line)
    assert list(entry) == ["key", "reply", "request"]
    assert list(entry["request"]) == sorted(entry["request"])
    assert line == json.dumps(entry, sort_keys=True) + "\n"


def test_merge_recording_makes_the_cassettes_folders(tmp_path: Path) -> None:
    from rlenv.verifiers.judge import merge_recording

    recorded = tmp_path / "new.jsonl"
    recorded.write_text('{"key": "a", "reply": "1", "request": {}}\n')
    target = tmp_path / "two" / "levels" / "judge.jsonl"
    assert merge_recording(recorded, target) == (1, 1)
    assert target.read_text() == recorded.read_text()


def test_describe_reads_every_verifier_for_judges(tmp_path: Path) -> None:
    from rlenv.spec import load_spec
    from rlenv.verifiers.judge import describe
    from tests.conftest import EnvBuilder
    from tests.test_judge_parts import JUDGE

    spec = EnvBuilder(tmp_path / "env").write(
        "def policy(messages, tools, ctx):\n    return 'x'\n",
        verifiers=[
            {"name": "exact", "type": "exact_match", "expected_field": "answer"},
            {
                "name": "judged",
                "type": "judge",
                "judge": {**JUDGE, "mode": "live", "cassette": None},
            },
        ],
    )
    assert list(describe(load_spec(spec))) == ["judged"]


def test_a_run_directory_keeps_each_live_exchange(tmp_path: Path, chat: Any) -> None:
    server = chat()
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None, base_url=server.base_url)

    class Writer:
        def write(self, record: dict[str, Any]) -> None:
            pass

        def close(self) -> None:
            pass

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    inputs = [type("Input", (), {"id": "a", "data": {"gold": "apple"}})()]
    writer = judging_writer(loaded, inputs, Writer(), run_dir)
    writer.write(pending("apple"))
    writer.close()
    import json

    lines = (run_dir / "judge-judged.jsonl").read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert list(entry) == ["key", "reply", "request"]
    assert list(entry["request"]) == sorted(entry["request"])
    assert lines[0] == json.dumps(entry, sort_keys=True)


def _rewarded_spec(root: Path, base_url: str) -> Any:
    """A live judge whose pass (not its score) is a reward term, after a python term."""
    from rlenv.spec import load_spec
    from tests.conftest import EnvBuilder
    from tests.test_judge_parts import JUDGE

    spec = EnvBuilder(root).write(
        "def policy(messages, tools, ctx):\n    return 'x'\n",
        inputs=[{"id": "a", "prompt": "say apple", "gold": "apple"}],
        rollouts=1,
        verifiers=[
            {
                "name": "judged",
                "type": "judge",
                "judge": {**JUDGE, "mode": "live", "cassette": None, "base_url": base_url},
            },
            {"name": "exact", "type": "exact_match", "expected_field": "gold"},
        ],
        reward={
            "components": {
                "length": {"function": "m:length", "weight": 0.5},
                "quality": {"verifier": "judged", "use": "passed", "weight": 2.0},
                "right": {"verifier": "exact", "weight": 1.0},
            }
        },
    )
    return load_spec(spec)


def _with_rewards(record: dict[str, Any], exact: dict[str, Any] | None) -> dict[str, Any]:
    from rlenv.results import seal

    record["rewards"] = {"length": 0.25, "quality": None, "right": None, "total": None}
    record["verifiers"] = record["verifiers"][:1] + ([exact] if exact is not None else [])
    record.pop("digest")
    return seal(record)


def test_settled_rewards_read_each_term_as_declared(tmp_path: Path, chat: Any) -> None:
    server = chat()
    loaded = _rewarded_spec(tmp_path / "env", server.base_url)
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None)
    graded = {"name": "exact", "type": "exact_match", "passed": True, "score": 1.0, "detail": None}
    record = judges.settle(_with_rewards(pending("apple"), graded))
    # the judge's pass (1.0), not its score (0.8); the python term before it kept
    assert record["rewards"] == {"length": 0.25, "quality": 1.0, "right": 1.0, "total": 3.125}
    # a verifier not applicable to this input (passed None), or absent: its term is None
    ungraded = {**graded, "passed": None, "score": None}
    for exact in (ungraded, None):
        record = judges.settle(_with_rewards(pending("apple"), exact))
        assert record["rewards"] == {"length": 0.25, "quality": 1.0, "right": None, "total": 2.125}


def test_settle_judges_only_what_is_pending(tmp_path: Path, chat: Any) -> None:
    server = chat()
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None)
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    done = pending("apple")
    done["verifiers"][0] = {**done["verifiers"][0], "passed": True, "score": 0.8, "detail": "ok"}
    assert judges.settle(done) is done
    assert server.received == []
    # an input the orchestrator does not know: judged on the answer and prompt alone
    plain = loaded_spec(tmp_path / "env2", "live", cassette=None, rubric="{{ answer }} score: 5")
    judges = Judges(plain, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    record = judges.settle(pending("apple", input_id="unknown"))
    assert record["verifiers"][0]["detail"] == "judge score 5 (of 0-10): echo: apple score: 5"


def test_a_failed_judgment_keeps_the_first_error(tmp_path: Path, chat: Any) -> None:
    server = chat(default_fault="500")
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None)
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    crashed = {**pending("apple"), "status": "verifier_error", "error": "verifier exact: boom"}
    record = judges.settle(crashed)
    assert (record["status"], record["error"]) == ("verifier_error", "verifier exact: boom")
    assert record["verifiers"][0]["detail"].startswith("judge judged: no live judgment")


def test_live_judgments_never_grow_a_cassette_and_missing_ones_all_do(
    tmp_path: Path, chat: Any
) -> None:
    from rlenv.verifiers.judge import load_cassette

    server = chat()
    live = loaded_spec(tmp_path / "live", "live")  # live, with a cassette named
    judges = Judges(live, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    judges.settle(pending("apple"))
    judges.close()
    assert not (tmp_path / "live" / "judge.jsonl").exists()
    growing = loaded_spec(tmp_path / "grow", "record_missing")
    judges = Judges(growing, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    for answer in ("apple", "pear", "plum"):
        judges.settle(pending(answer))
    assert judges.close() == {"judged": {"live": 3, "replayed": 0}}
    assert len(load_cassette(tmp_path / "grow" / "judge.jsonl")) == 3


def _two_judges(root: Path, first: dict[str, Any], second: dict[str, Any]) -> Any:
    """A spec with two live judges, `first` and `second` (their judge settings merged in)."""
    from rlenv.spec import load_spec
    from tests.conftest import EnvBuilder
    from tests.test_judge_parts import JUDGE

    spec = EnvBuilder(root).write(
        "def policy(messages, tools, ctx):\n    return 'x'\n",
        inputs=[{"id": "a", "prompt": "say apple", "gold": "apple"}],
        rollouts=1,
        verifiers=[
            {"name": name, "type": "judge", "judge": {**JUDGE, **settings}}
            for name, settings in (("first", first), ("second", second))
        ],
    )
    return load_spec(spec)


def _pending_both(answer: str) -> dict[str, Any]:
    from rlenv.results import seal

    record = pending(answer)
    record["verifiers"] = [{**record["verifiers"][0], "name": n} for n in ("first", "second")]
    record.pop("rewards")
    record.pop("digest")
    return seal(record)


def test_a_failed_judgment_does_not_stop_the_next_one(tmp_path: Path, chat: Any) -> None:
    """The first judge's server fails: the second judge on the same record still judges."""
    down, up = chat(default_fault="500"), chat()
    loaded = _two_judges(
        tmp_path / "env",
        {"mode": "live", "cassette": None, "base_url": down.base_url},
        {"mode": "live", "cassette": None, "base_url": up.base_url},
    )
    record = Judges(loaded, {"a": {"gold": "apple"}}, None).settle(_pending_both("apple"))
    first, second = record["verifiers"]
    assert first["detail"].startswith("judge first: no live judgment")
    assert second["passed"] is True and second["score"] is not None, second


def test_every_growing_cassette_is_merged_at_close(tmp_path: Path, chat: Any) -> None:
    """A live judge's exchanges come first in what close() reads: the record_missing judge
    after it still has its cassette grown."""
    from rlenv.verifiers.judge import load_cassette

    server = chat()
    loaded = _two_judges(
        tmp_path / "env",
        {"mode": "live", "cassette": None, "base_url": server.base_url},
        {"mode": "record_missing", "base_url": server.base_url},
    )
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None)
    judges.settle(_pending_both("apple"))
    assert judges.close() == {
        "first": {"live": 1, "replayed": 0},
        "second": {"live": 1, "replayed": 0},
    }
    assert len(load_cassette(tmp_path / "env" / "judge.jsonl")) == 1
