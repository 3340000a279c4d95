"""The judge verifier in process (rlenv.verifiers.judge): the request a rollout makes and its
key, the verdict read from a reply, the cassette read and merged, replay / record_missing /
live in the world, and the orchestrator's live judgments (`Judges`) against a real loopback
chat server. The mutation run's fast set for rlenv/verifiers/judge.py; tests/test_judge.py and
tests/test_judge_modes.py run the same promises through `rlenv record` / `rlenv run`."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.errors import FixtureMiss, UserError
from rlenv.results import record_digest, seal
from rlenv.spec import Judge, Verifier, load_spec
from rlenv.verifiers import judge as judging
from rlenv.verifiers.base import LiveJudgment, VerifierContext
from rlenv.verifiers.judge import (
    DETAIL_LIMIT,
    PENDING_JUDGMENT,
    Judges,
    build,
    configure,
    describe,
    judge_request,
    judging_writer,
    key_of,
    load_cassette,
    merge_recording,
    verdict_of,
)
from tests.conftest import EnvBuilder

RUBRIC = (
    "Grade {{ answer }} for '{{ prompt }}' (gold {{ gold }})."
    " score: {{ 8 if answer == gold else 2 }}"
)
JUDGE = {
    "model": "openai:judge-1",
    "rubric": RUBRIC,
    "cassette": {"path": "judge.jsonl"},
    "scale": [0, 10],
    "threshold": 0.6,
}


@pytest.fixture(autouse=True)
def replay_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts in replay mode with the spec root at tmp_path; restored after."""
    saved = (
        judging.MODE.live,
        judging.MODE.spec_root,
        judging.MODE.record_dir,
        judging.MODE.base_url,
    )
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    configure(live=False, spec_root=tmp_path)
    yield
    judging.MODE.live, judging.MODE.spec_root, judging.MODE.record_dir, judging.MODE.base_url = (
        saved
    )


def verifier(**judge: Any) -> Verifier:
    return Verifier(type="judge", name="judged", judge={**JUDGE, **judge})


def context(answer: str | None, gold: str = "apple", prompt: str = "say apple") -> VerifierContext:
    return VerifierContext(
        answer=answer,
        messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
        input={"id": "a", "gold": gold},
        workdir=Path("."),
        seed=0,
    )


def test_the_request_renders_the_rubric_and_pins_the_decoding() -> None:
    config = verifier(temperature=0.5, max_tokens=9)
    request = judge_request(config, {"gold": "apple"}, "apple", [{"content": "say apple"}])
    assert request == {
        "model": "judge-1",
        "messages": [
            {"role": "user", "content": "Grade apple for 'say apple' (gold apple). score: 8"}
        ],
        "temperature": 0.5,
        "max_tokens": 9,
    }
    empty = judge_request(config, {"gold": "apple"}, None, [])
    assert empty["messages"][0]["content"] == "Grade  for '' (gold apple). score: 2"
    assert key_of(request) == "sha256:" + sha256_bytes(canonical_bytes(request))
    assert key_of(request) != key_of(empty)


def test_the_prompt_is_the_users_after_a_system_prompt() -> None:
    """README: `Rate {{ answer }} for {{ prompt }}`: the input's prompt, not the system's."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "say apple"},
        {"role": "assistant", "content": "apple"},
    ]
    request = judge_request(verifier(), {"gold": "apple"}, "apple", messages)
    assert request["messages"][0]["content"] == "Grade apple for 'say apple' (gold apple). score: 8"


def test_the_verdict_read_from_a_reply() -> None:
    judge = Judge(**JUDGE)
    assert verdict_of(judge, "Good.\n  score: 8 ") == (
        True,
        0.8,
        "judge score 8 (of 0-10): Good. score: 8",
    )
    assert verdict_of(judge, "score: 6")[:2] == (True, 0.6)  # at the threshold: passes
    assert verdict_of(judge, "score: 5.9")[:2] == (False, pytest.approx(0.59))
    assert verdict_of(judge, "SCORE = 12")[:2] == (True, 1.0)  # clipped to the scale
    assert verdict_of(judge, "score: -3")[:2] == (False, 0.0)
    assert verdict_of(judge, "score: 2, then score: 9")[:2] == (False, 0.2)  # the first match
    shifted = Judge(**{**JUDGE, "scale": [1, 5], "threshold": 0.5})
    assert verdict_of(shifted, "score: 3") == (True, 0.5, "judge score 3 (of 1-5): score: 3")
    assert verdict_of(judge, "no number\there") == (
        False,
        0.0,
        f"judge gave no score matching {judge.score_pattern!r}: no number here",
    )
    passed, score, detail = verdict_of(judge, "score: 9 " + "why " * 2000)
    assert passed and score == 0.9
    assert len(detail) == len("judge score 9 (of 0-10): ") + DETAIL_LIMIT and detail.endswith("…")
    exact = "x" * DETAIL_LIMIT
    assert verdict_of(judge, exact)[2].endswith(": " + exact)  # at the limit: kept whole


def test_a_cassette_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "judge.jsonl"
    assert load_cassette(path) == {}
    path.write_text('{"key": "k1", "reply": "score: 1"}\n\n{"key": 2, "reply": 3}\n')
    assert load_cassette(path) == {"k1": "score: 1", "2": "3"}
    path.write_text('{"key": "k1", "reply": "a\u2028b"}\n')  # a reply may hold U+2028
    assert load_cassette(path) == {"k1": "a\u2028b"}
    path.write_text('{"key": "k1", "reply": "x"}\n{"key": "k2"}\n')
    with pytest.raises(UserError, match=r"judge.jsonl:2: bad judge cassette line"):
        load_cassette(path)
    path.write_text('{"key": "k1", "reply": "x"}\nnot json\n')
    with pytest.raises(UserError, match=r"judge.jsonl:2: bad judge cassette line"):
        load_cassette(path)
    path.write_text("[1]\n")
    with pytest.raises(UserError, match=r"judge.jsonl:1: bad judge cassette line"):
        load_cassette(path)
    path.write_bytes(b'{"key": "k", "reply": "\xff"}\n')
    with pytest.raises(UserError, match="cannot read the judge cassette"):
        load_cassette(path)


def _line(key: str, reply: str) -> str:
    return json.dumps({"key": key, "reply": reply, "request": {}}, sort_keys=True)


def test_merge_recording_sorted_one_per_key(tmp_path: Path) -> None:
    cassette = tmp_path / "deep" / "judge.jsonl"
    recorded = tmp_path / "new.jsonl"
    recorded.write_text(
        _line("b", "1") + "\n\n" + _line("a", "2") + "\n" + _line("b", "other") + "\n"
    )
    assert merge_recording(recorded, cassette) == (2, 2)
    assert cassette.read_text() == _line("a", "2") + "\n" + _line("b", "1") + "\n"
    recorded.write_text(_line("c", "3") + "\n" + _line("a", "changed") + "\n")
    assert merge_recording(recorded, cassette) == (3, 1)  # the cassette's exchange stays
    assert load_cassette(cassette) == {"a": "2", "b": "1", "c": "3"}
    assert merge_recording(recorded, cassette, keep=False) == (2, 2)
    assert load_cassette(cassette) == {"a": "changed", "c": "3"}
    assert merge_recording(tmp_path / "absent.jsonl", cassette) == (2, 0)
    assert merge_recording(tmp_path / "absent.jsonl", cassette, keep=False) == (0, 0)
    assert cassette.read_text() == ""


def test_replay_plays_the_cassette_and_names_a_miss(tmp_path: Path) -> None:
    config = verifier()
    request = judge_request(
        config, {"id": "a", "gold": "apple"}, "apple", context("apple").messages
    )
    (tmp_path / "judge.jsonl").write_text(_line(key_of(request), "fine. score: 7") + "\n")
    check = build(config)
    assert check(context("apple")) == (True, 0.7, "judge score 7 (of 0-10): fine. score: 7")
    with pytest.raises(FixtureMiss) as caught:
        check(context("pear"))
    missing = key_of(
        judge_request(config, {"id": "a", "gold": "apple"}, "pear", context("pear").messages)
    )
    assert str(caught.value) == (
        f"judge judged: request {missing[:19]}… was never recorded (judge mode replay: run"
        " `rlenv record` with the judge reachable, or set judge.mode record_missing or live to"
        " judge new answers)"
    )
    (tmp_path / "judge.jsonl").write_text("")  # read once per built verifier
    assert check(context("apple"))[0] is True
    with pytest.raises(FixtureMiss):
        build(config)(context("apple"))


def test_the_cassette_is_found_from_the_spec_root_or_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = verifier()
    request = judge_request(
        config, {"id": "a", "gold": "apple"}, "apple", context("apple").messages
    )
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "judge.jsonl").write_text(_line(key_of(request), "score: 10") + "\n")
    judging.MODE.spec_root = None
    monkeypatch.chdir(tmp_path / "cwd")
    assert build(config)(context("apple"))[:2] == (True, 1.0)


def test_record_missing_and_live_leave_the_judgment_to_the_orchestrator(tmp_path: Path) -> None:
    (tmp_path / "judge.jsonl").write_text("")
    with pytest.raises(LiveJudgment) as caught:
        build(verifier(mode="record_missing"))(context("apple"))
    request = judge_request(
        verifier(), {"id": "a", "gold": "apple"}, "apple", context("apple").messages
    )
    assert caught.value.args == (key_of(request),)
    live = Verifier(type="judge", name="judged", judge={**JUDGE, "mode": "live", "cassette": None})
    with pytest.raises(LiveJudgment):
        build(live)(context("apple"))


def test_recording_asks_the_judge_and_keeps_the_exchange(
    tmp_path: Path, chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = chat()
    record_dir = tmp_path / "recording"
    record_dir.mkdir()
    configure(
        live=True, spec_root=tmp_path, record_dir=record_dir, base_url=server.base_url + "/v1"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")
    config = verifier()
    passed, score, detail = build(config)(context("apple"))
    assert (passed, score) == (True, 0.8)
    assert (
        detail
        == "judge score 8 (of 0-10): echo: Grade apple for 'say apple' (gold apple). score: 8"
    )
    assert server.log[0]["authorization"] == "Bearer sk-test-judge"
    request = judge_request(
        config, {"id": "a", "gold": "apple"}, "apple", context("apple").messages
    )
    assert server.received == [request]
    lines = (record_dir / "judge-judged.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "key": key_of(request),
            "reply": "echo: " + request["messages"][0]["content"],
            "request": request,
        }
    ]
    build(config)(context("pear"))
    assert len((record_dir / "judge-judged.jsonl").read_text().splitlines()) == 2
    # the judge's own base_url comes first
    other = chat()
    build(verifier(base_url=other.base_url))(context("apple"))
    assert len(other.received) == 1 and len(server.received) == 2


def test_recording_without_a_reply_says_so(
    tmp_path: Path, chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(live=True, spec_root=tmp_path, record_dir=tmp_path)
    with pytest.raises(FixtureMiss) as caught:
        build(verifier())(context("apple"))
    assert str(caught.value) == (
        "judge judged: no reply to record (UserError: a judge verifier records against"
        " judge.base_url or OPENAI_BASE_URL)"
    )
    server = chat(default_fault="500")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    with pytest.raises(FixtureMiss, match=r"judge judged: no reply to record \(HTTPStatusError"):
        build(verifier())(context("apple"))
    assert server.log[0]["authorization"] is None  # no key in the environment: none sent
    assert not (tmp_path / "judge-judged.jsonl").exists()


def loaded_spec(root: Path, mode: str, **judge: Any) -> Any:
    inputs = [
        {"id": "a", "prompt": "say apple", "gold": "apple"},
        {"id": "b", "prompt": "say b", "gold": "cherry"},
    ]
    spec = EnvBuilder(root).write(
        "def policy(messages, tools, ctx):\n    return 'x'\n",
        inputs=inputs,
        rollouts=1,
        verifiers=[
            {"name": "judged", "type": "judge", "judge": {**JUDGE, "mode": mode, **judge}},
            {"name": "exact", "type": "exact_match", "expected_field": "gold"},
        ],
        reward={
            "components": {
                "quality": {"verifier": "judged", "use": "score", "weight": 2.0},
                "right": {"verifier": "exact", "weight": 1.0},
            }
        },
    )
    return load_spec(spec)


def pending(answer: str, input_id: str = "a", exact: bool = True) -> dict[str, Any]:
    return seal(
        {
            "input_id": input_id,
            "input_index": 0,
            "rollout": 0,
            "answer": answer,
            "messages": [
                {"role": "user", "content": "say apple"},
                {"role": "assistant", "content": answer},
            ],
            "passed": False,
            "status": "ok",
            "error": None,
            "rewards": {"quality": None, "right": 1.0 if exact else 0.0, "total": None},
            "verifiers": [
                {
                    "name": "judged",
                    "type": "judge",
                    "passed": None,
                    "score": None,
                    "detail": PENDING_JUDGMENT,
                },
                {
                    "name": "exact",
                    "type": "exact_match",
                    "passed": exact,
                    "score": float(exact),
                    "detail": None,
                },
            ],
        }
    )


def test_describe_pins_what_a_live_judgment_depends_on(tmp_path: Path) -> None:
    loaded = loaded_spec(
        tmp_path / "env", "live", cassette=None, base_url="http://user:pw@judge.test/v1"
    )
    described = describe(loaded)
    assert described == {
        "judged": {
            "mode": "live",
            "model": "openai:judge-1",
            "temperature": 0.0,
            "max_tokens": 256,
            "rubric_sha256": sha256_bytes(RUBRIC.encode()),
            "score_pattern": Judge(**JUDGE).score_pattern,
            "scale": [0.0, 10.0],
            "threshold": 0.6,
            "base_url": described["judged"]["base_url"],
        }
    }
    assert "pw" not in described["judged"]["base_url"]
    assert "base_url" not in describe(loaded_spec(tmp_path / "env2", "replay"))["judged"]


def test_judges_settle_a_pending_record_live_and_count_it(tmp_path: Path, chat: Any) -> None:
    server = chat()
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None)
    log_dir = tmp_path / "run"
    log_dir.mkdir()
    judges = Judges(loaded, {"a": {"gold": "apple"}}, log_dir, base_url=server.base_url)
    assert judges
    record = judges.settle(pending("apple"))
    judged = record["verifiers"][0]
    assert (judged["passed"], judged["score"]) == (True, 0.8)
    assert judged["detail"].startswith("judge score 8 (of 0-10): echo: Grade apple")
    assert record["passed"] is True
    assert record["rewards"] == {"quality": 0.8, "right": 1.0, "total": 2.6}
    assert record["digest"] == record_digest(record)
    assert len((log_dir / "judge-judged.jsonl").read_text().splitlines()) == 1
    wrong = judges.settle(pending("pear", exact=False))
    assert wrong["passed"] is False and wrong["rewards"]["total"] == pytest.approx(0.4)
    assert judges.settle(pending("apple"))["verifiers"][0]["score"] == 0.8  # live: asked again
    assert len(server.received) == 3
    assert judges.close() == {"judged": {"live": 3, "replayed": 0}}
    done = seal(
        {**pending("apple"), "verifiers": [{"name": "exact", "passed": True, "detail": None}]}
    )
    assert judges.settle(done) is done  # nothing pending: the record as it was


def test_judges_record_missing_replays_first_and_grows_the_cassette(
    tmp_path: Path, chat: Any
) -> None:
    server = chat()
    loaded = loaded_spec(tmp_path / "env", "record_missing")
    cassette = tmp_path / "env" / "judge.jsonl"
    config = loaded.spec.verifiers[0]
    known = judge_request(config, {"gold": "apple"}, "apple", pending("apple")["messages"])
    cassette.write_text(_line(key_of(known), "score: 10") + "\n")
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    assert judges.settle(pending("apple"))["verifiers"][0]["score"] == 1.0
    assert server.received == []
    assert judges.settle(pending("pear", exact=False))["verifiers"][0]["score"] == 0.2
    assert judges.settle(pending("pear", exact=False))["verifiers"][0]["score"] == 0.2  # now known
    assert len(server.received) == 1
    assert judges.close() == {"judged": {"live": 1, "replayed": 2}}
    assert len(load_cassette(cassette)) == 2
    assert not list(cassette.parent.glob("*.new"))  # the staged file is gone
    assert judges.close() == {"judged": {"live": 1, "replayed": 2}}  # nothing new to merge
    assert len(load_cassette(cassette)) == 2


def test_the_orchestrators_judges_ignore_a_workers_recording_url(
    tmp_path: Path, chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`configure(base_url=...)` is the recording worker's; a live judgment made outside the
    world (training, `run` in record_missing/live mode) reaches OPENAI_BASE_URL even when this
    process once recorded against a server that has since stopped (seen on CI: a test that
    recorded left its URL in the process-global, and a later one judged against it)."""
    server = chat()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    configure(live=False, spec_root=tmp_path, base_url=dead)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None)
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None)
    record = judges.settle(pending("apple"))
    assert record["status"] == "ok", record["error"]
    assert len(server.received) == 1


def test_a_failed_live_judgment_fails_the_rollout(tmp_path: Path, chat: Any) -> None:
    server = chat(default_fault="500")
    loaded = loaded_spec(tmp_path / "env", "live", cassette=None)
    judges = Judges(loaded, {"a": {"gold": "apple"}}, None, base_url=server.base_url)
    record = judges.settle(pending("apple"))
    assert record["status"] == "verifier_error" and record["passed"] is False
    assert record["error"].startswith("judge judged: no live judgment (HTTPStatusError")
    assert record["verifiers"][0]["detail"] == record["error"]
    assert record["rewards"]["total"] is None  # never a partial total
    assert record["digest"] == record_digest(record)
    assert judges.close() == {"judged": {"live": 0, "replayed": 0}}


def test_replay_judges_need_no_orchestrator(tmp_path: Path) -> None:
    loaded = loaded_spec(tmp_path / "env", "replay")
    judges = Judges(loaded, {}, None)
    assert not judges and judges.configs == {}

    class Writer:
        def __init__(self) -> None:
            self.written: list[dict[str, Any]] = []
            self.closed = False

        def write(self, record: dict[str, Any]) -> None:
            self.written.append(record)

        def close(self) -> None:
            self.closed = True

    plain = Writer()
    assert judging_writer(loaded, [], plain, tmp_path) is plain
    live = loaded_spec(tmp_path / "env2", "live", cassette=None)
    wrapped = judging_writer(live, [], Writer(), tmp_path)
    assert wrapped is not None and wrapped.writer is not None
    wrapped.write(seal({**pending("x"), "verifiers": []}))
    wrapped.close()
    assert wrapped.writer.closed and len(wrapped.writer.written) == 1
