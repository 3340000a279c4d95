"""The built-in verifiers in process (rlenv.verifiers.builtin): what each one decides for an
answer, how it says why, and what a verifier that raises or returns nonsense becomes. Written
against mutmut's survivors (bench/mutants.py): each test is an answer a broken verifier would
grade differently."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from rlenv.errors import FixtureMiss, UserError, VerifierCrash
from rlenv.spec import Verifier
from rlenv.verifiers.base import LiveJudgment, VerifierContext, VerifierResult
from rlenv.verifiers.builtin import BuiltVerifier, _checked_output, build_verifiers, normalise
from rlenv.verifiers.judge import PENDING_JUDGMENT

HERE = "tests.test_mutants_builtin"


def grade(
    config: dict[str, Any],
    answer: str | None,
    record: dict[str, Any] | None = None,
    workdir: Path = Path("."),
) -> VerifierResult:
    verifier = BuiltVerifier(Verifier.model_validate(config))
    return verifier(VerifierContext(answer, [], record or {"id": "q"}, workdir, 0))


def outcome(result: VerifierResult) -> tuple[bool | None, float | None, str | None]:
    return result.passed, result.score, result.detail


@pytest.mark.parametrize(
    ("steps", "text", "expected"),
    [
        (["lower"], " The, Cat ", " the, cat "),
        (["strip"], " The, Cat ", "The, Cat"),
        (["punctuation"], "a.b,c!", "abc"),
        (["articles"], "a cat the dog an owl", "  cat   dog   owl"),
        (["whitespace"], " a \n b\t c ", "a b c"),
        (["lower", "articles", "whitespace"], "The  Cat", "cat"),
        ([], " The ", " The "),
    ],
)
def test_normalise_does_each_step_and_only_it(steps: list[str], text: str, expected: str) -> None:
    assert normalise(text, steps) == expected


def test_exact_match_reads_aliases_and_a_list_of_golds() -> None:
    config = {"type": "exact_match", "expected_field": "answer", "aliases_field": "aka"}
    record = {"id": "q", "answer": "Paris", "aka": ["City of Light"]}
    assert outcome(grade(config, "city of light", record)) == (True, 1.0, None)
    assert outcome(grade(config, "London", record)) == (False, 0.0, "expected 'Paris'")
    # aliases that are not a list are not read
    assert not grade(config, "x", {"id": "q", "answer": "Paris", "aka": "x"}).passed
    listed = {"type": "exact_match", "expected_field": "answer"}
    assert grade(listed, "b", {"id": "q", "answer": ["a", "b"]}).passed
    assert grade(listed, "None", {"id": "q", "answer": ["a", "b"]}).passed is False
    # no answer at all is the empty text, which only an empty gold matches
    assert grade({"type": "exact_match", "expected": ""}, None).passed
    assert not grade({"type": "exact_match", "expected": "x"}, None).passed


def test_regex_flags_and_fullmatch() -> None:
    assert outcome(grade({"type": "regex", "pattern": "b+"}, "abbc")) == (True, 1.0, None)
    assert outcome(grade({"type": "regex", "pattern": "b+", "fullmatch": True}, "abbc")) == (
        False,
        0.0,
        "pattern not found",
    )
    assert grade({"type": "regex", "pattern": "b+", "fullmatch": True}, "bb").passed
    assert not grade({"type": "regex", "pattern": "B"}, "b").passed
    assert grade({"type": "regex", "pattern": "B", "flags": ["ignorecase"]}, "b").passed
    assert not grade({"type": "regex", "pattern": "^b"}, "a\nb").passed
    assert grade({"type": "regex", "pattern": "^b", "flags": ["multiline"]}, "a\nb").passed
    assert not grade({"type": "regex", "pattern": "a.b"}, "a\nb").passed
    assert grade({"type": "regex", "pattern": "a.b", "flags": ["dotall"]}, "a\nb").passed
    both = {"type": "regex", "pattern": "^B.C", "flags": ["ignorecase", "dotall", "multiline"]}
    assert grade(both, "a\nb\nc").passed
    assert grade({"type": "regex", "pattern": "^$"}, None).passed  # no answer: empty text
    with pytest.raises(UserError, match=r"verifier 'regex': invalid regex"):
        BuiltVerifier(Verifier.model_validate({"type": "regex", "pattern": "("}))


def test_numeric_tolerances_and_its_detail() -> None:
    config = {"type": "numeric", "expected": 100}
    assert outcome(grade(config, "100.0000001")) == (True, 1.0, None)
    assert outcome(grade(config, "101")) == (False, 0.0, "got 101, expected 100")
    assert grade({**config, "tolerance": 1}, "101").passed
    assert not grade({**config, "tolerance": 0.5}, "101").passed
    assert grade({**config, "relative_tolerance": 0.01}, "101").passed
    assert not grade({**config, "relative_tolerance": 0.001}, "101").passed
    passed, score, detail = outcome(grade(config, "no number here"))
    assert (passed, score) == (False, 0.0) and detail and "no number" in detail
    assert not grade(config, None).passed


def test_contains_scores_the_share_of_checks_met() -> None:
    config = {"type": "contains", "all": ["red", "blue"], "none": ["green", "pink"]}
    assert outcome(grade(config, "red and blue")) == (True, 1.0, None)
    assert outcome(grade(config, "red and green")) == (
        False,
        0.5,
        "missing ['blue']; forbidden ['green']",
    )
    assert outcome(grade(config, "red, blue, pink")) == (False, 0.75, "forbidden ['pink']")
    assert outcome(grade(config, "blue")) == (False, 0.75, "missing ['red']")
    gold = {"type": "contains", "expected_field": "answer"}
    assert grade(gold, "it is 4 and 2", {"id": "q", "answer": [4, 2]}).passed
    assert outcome(grade(gold, "it is 4", {"id": "q", "answer": [4, 2]})) == (
        False,
        0.5,
        "missing ['2']",
    )
    # the gold is compared as the answer is: normalised (lower) on both sides
    assert grade(gold, "it is paris", {"id": "q", "answer": "PARIS"}).passed
    assert not grade(
        {**gold, "normalize": []}, "it is paris", {"id": "q", "answer": "PARIS"}
    ).passed


def returns(answer: str | None, record: dict[str, Any], context: Any, **options: Any) -> Any:
    """A python verifier that returns what the input's `returns` field holds."""
    assert context.input is record
    if options:
        return options
    return record["returns"]


def answer_is(answer: str | None, record: dict[str, Any], context: Any) -> bool:
    return answer == record["want"]


def test_python_verifier_is_given_the_answer() -> None:
    config = {"type": "python", "function": f"{HERE}:answer_is"}
    assert grade(config, "yes", {"id": "q", "want": "yes"}).passed
    assert not grade(config, "no", {"id": "q", "want": "yes"}).passed


NOT_CALLABLE = 42


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, (True, 1.0, None)),
        (False, (False, 0.0, None)),
        (1, (True, 1.0, None)),
        (0.99, (False, 0.99, None)),
        (2.5, (True, 2.5, None)),
        ((1, "fine"), (True, 1.0, "fine")),
        ((0, None), (False, 0.0, None)),
        ((True, 3), (True, 1.0, "3")),
        ((False, "wrong"), (False, 0.0, "wrong")),
        ((True, None), (True, 1.0, None)),
        ({"passed": True}, (True, 1.0, None)),
        ({"passed": 0, "score": 0.25, "detail": "close"}, (False, 0.25, "close")),
        ({"passed": 1, "detail": "ok"}, (True, 1.0, "ok")),
    ],
)
def test_python_verifier_return_shapes(value: Any, expected: tuple[Any, ...]) -> None:
    config = {"type": "python", "function": f"{HERE}:returns"}
    assert outcome(grade(config, "x", {"id": "q", "returns": value})) == expected


@pytest.mark.parametrize("value", [None, "yes", (1, 2, 3), {"score": 1}, [True]])
def test_python_verifier_other_returns_fail_with_the_type(value: Any) -> None:
    config = {"type": "python", "function": f"{HERE}:returns"}
    result = grade(config, "x", {"id": "q", "returns": value})
    assert (result.passed, result.score) == (False, 0.0)
    assert result.detail == (
        f"verifier error: TypeError: returned {type(value).__name__}; expected bool, float,"
        " tuple or dict"
    )


def test_python_verifier_gets_the_options_and_must_be_callable() -> None:
    config = {"type": "python", "function": f"{HERE}:returns", "options": {"passed": True}}
    assert outcome(grade(config, "x", {"id": "q"})) == (True, 1.0, None)
    with pytest.raises(UserError, match=rf"verifier 'python': {HERE}:NOT_CALLABLE is not callable"):
        BuiltVerifier(
            Verifier.model_validate({"type": "python", "function": f"{HERE}:NOT_CALLABLE"})
        )
    with pytest.raises(UserError, match="verifier 'python'"):
        BuiltVerifier(Verifier.model_validate({"type": "python", "function": f"{HERE}:nowhere"}))


def test_file_state_branches(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("  Hello World \n", encoding="utf-8")
    digest = hashlib.sha256((tmp_path / "out.txt").read_bytes()).hexdigest()

    def state(answer_config: dict[str, Any], record: dict[str, Any] | None = None) -> Any:
        config = {"type": "file_state", "path": "out.txt", **answer_config}
        return outcome(grade(config, "", record, tmp_path))

    assert state({}) == (True, 1.0, None)
    assert state({"exists": False}) == (False, 0.0, "out.txt exists")
    assert outcome(
        grade({"type": "file_state", "path": "gone.txt", "exists": False}, "", None, tmp_path)
    ) == (True, 1.0, None)
    assert outcome(grade({"type": "file_state", "path": "gone.txt"}, "", None, tmp_path)) == (
        False,
        0.0,
        "gone.txt does not exist",
    )
    assert state({"sha256": digest}) == (True, 1.0, None)
    assert state({"sha256": "0" * 64}) == (False, 0.0, "out.txt hash differs")
    assert state({"contains": "World"}) == (True, 1.0, None)
    assert state({"contains": "world"}) == (False, 0.0, "out.txt lacks 'world'")
    assert state({"expected": "hello world"}) == (True, 1.0, None)
    assert state({"expected": "hello world", "normalize": []}) == (
        False,
        0.0,
        "out.txt content differs",
    )
    assert state({"expected_field": "want"}, {"id": "q", "want": "HELLO WORLD"}) == (
        True,
        1.0,
        None,
    )
    assert state({"expected_field": "want"}, {"id": "q", "want": "bye"})[0] is False
    # the path read from the input; a path out of the workdir is refused before it is read
    by_field = {"type": "file_state", "path_field": "file"}
    assert grade(by_field, "", {"id": "q", "file": "out.txt"}, tmp_path).passed
    assert outcome(grade(by_field, "", {"id": "q", "file": "../out.txt"}, tmp_path)) == (
        False,
        0.0,
        "path '../out.txt' leaves the workdir",
    )
    # a directory is not a file
    (tmp_path / "dir").mkdir()
    assert outcome(grade({"type": "file_state", "path": "dir"}, "", None, tmp_path)) == (
        False,
        0.0,
        "dir does not exist",
    )


def raises(answer: str | None, record: dict[str, Any], context: Any) -> Any:
    raise record["raise"]


def gives_state(answer: str | None, record: dict[str, Any], context: Any) -> Any:
    return record["returns"]


def _raised(error: BaseException) -> VerifierResult:
    config = {"type": "python", "function": f"{HERE}:raises", "name": "mine"}
    return grade(config, "x", {"id": "q", "raise": error})


def test_a_verifier_that_raises_fails_with_its_frames() -> None:
    result = _raised(KeyError("b"))
    assert (result.name, result.type, result.passed, result.score) == ("mine", "python", False, 0.0)
    assert result.detail == "verifier error: KeyError: 'b'"
    assert result.traceback and "raises" in result.traceback[-1]
    assert result.as_dict()["traceback"] == result.traceback


def test_a_verifier_that_ends_its_process_is_a_crash() -> None:
    with pytest.raises(VerifierCrash, match=r"^verifier mine: SystemExit: 3$") as caught:
        _raised(SystemExit(3))
    assert caught.value.frames and "raises" in caught.value.frames[-1]
    with pytest.raises(VerifierCrash, match=r"^verifier mine: recorded nothing for GET /x$"):
        _raised(FixtureMiss("recorded nothing for GET /x"))


def test_a_live_judgment_is_pending_not_graded() -> None:
    result = _raised(LiveJudgment())
    assert (result.name, result.type, result.passed, result.score, result.detail) == (
        "mine",
        "python",
        None,
        None,
        PENDING_JUDGMENT,
    )


class _Grader:
    def __init__(self, output: tuple[Any, ...]) -> None:
        self.output = output

    def __call__(self, context: VerifierContext) -> tuple[Any, ...]:
        return self.output


def _built(output: tuple[Any, ...]) -> VerifierResult:
    verifier = BuiltVerifier(Verifier.model_validate({"type": "regex", "pattern": "x"}))
    verifier.grader = _Grader(output)
    return verifier(VerifierContext("x", [], {"id": "q"}, Path("."), 0))


def test_a_fourth_element_is_the_state_diff() -> None:
    result = _built((True, 1, "d", {"changed": 1}))
    assert (result.passed, result.score, result.detail, result.state) == (
        True,
        1.0,
        "d",
        {"changed": 1},
    )
    assert isinstance(result.score, float)
    assert _built((True, 1, None)).state is None


@pytest.mark.parametrize(
    ("output", "detail"),
    [
        ((1, 1.0, None), "verifier error: TypeError: returned passed=int; expected a bool"),
        ((True, True, None), "verifier error: TypeError: returned score=bool; expected a number"),
        ((True, "1", None), "verifier error: TypeError: returned score=str; expected a number"),
        (
            (True, float("nan"), None),
            "verifier error: ValueError: returned score nan; expected a finite number",
        ),
        (
            (True, float("inf"), None),
            "verifier error: ValueError: returned score inf; expected a finite number",
        ),
        (
            (True, 1.0, b"x"),
            "verifier error: TypeError: returned detail=bytes; expected a string or None",
        ),
    ],
)
def test_what_a_record_cannot_hold_fails_the_verdict(output: tuple[Any, ...], detail: str) -> None:
    result = _built(output)
    assert (result.passed, result.score, result.detail) == (False, 0.0, detail)


def test_checked_output_keeps_what_a_record_holds() -> None:
    assert _checked_output(True, 1, "d") == (True, 1.0, "d")
    assert _checked_output(False, -2.5, None) == (False, -2.5, None)
    assert type(_checked_output(True, 1, None)[1]) is float


def test_build_verifiers_keeps_the_order() -> None:
    configs = [
        Verifier.model_validate({"type": "regex", "pattern": "a", "name": "first"}),
        Verifier.model_validate({"type": "exact_match", "expected": "a", "name": "second"}),
    ]
    built = build_verifiers(configs)
    assert [verifier.config.name for verifier in built] == ["first", "second"]


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ('{"score": NaN}', "answer is not strict JSON (NaN is not JSON)"),
        ('{"score": -Infinity}', "answer is not strict JSON (-Infinity is not JSON)"),
        ('{"score": 1e999}', "answer is not strict JSON (1e999 is not a finite number)"),
        ('{"a": 1, "a": 2}', "answer is not strict JSON (key 'a' appears twice)"),
        ("{", "answer is not JSON (Expecting property name enclosed in double quotes)"),
    ],
)
def test_json_schema_says_why_an_answer_is_not_strict_json(answer: str, detail: str) -> None:
    config = {"type": "json_schema", "schema": {"type": "object"}}
    assert outcome(grade(config, answer)) == (False, 0.0, detail)


def test_file_state_without_its_path_field_checks_no_file(tmp_path: Path) -> None:
    """An input without the field names no file: it fails, whatever the workdir holds (a file
    called "None" or "XXXX" included)."""
    for name in ("None", "XXXX"):
        (tmp_path / name).write_text("x")
    config = {"type": "file_state", "path_field": "file"}
    assert outcome(grade(config, "", {"id": "q"}, tmp_path)) == (False, 0.0, " does not exist")


def test_file_state_reads_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_bytes(b"caf\xe9 done\n")
    config = {"type": "file_state", "path": "out.txt", "contains": "done"}
    assert outcome(grade(config, "", None, tmp_path)) == (True, 1.0, None)
    equal = {"type": "file_state", "path": "out.txt", "expected": "caf\ufffd done"}
    assert grade(equal, "", None, tmp_path).passed


def test_the_sandboxed_and_judged_verifiers_are_built_from_their_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlenv.verifiers import judge as judging

    with pytest.raises(UserError, match=r"verifier 'python_tests': unknown sandbox option\(s\)"):
        BuiltVerifier(
            Verifier.model_validate(
                {"type": "python_tests", "expected_field": "tests", "options": {"bogus": 1}}
            )
        )
    monkeypatch.setattr(judging.MODE, "live", False)
    monkeypatch.setattr(judging.MODE, "spec_root", tmp_path)
    judged = BuiltVerifier(
        Verifier.model_validate(
            {
                "type": "judge",
                "name": "judged",
                "judge": {"model": "openai:j", "rubric": "{{ answer }}", "cassette": {"path": "j"}},
            }
        )
    )
    with pytest.raises(VerifierCrash, match=r"^verifier judged: judge judged: request sha256:"):
        judged(VerifierContext("x", [], {"id": "q"}, tmp_path, 0))


def test_each_state_verifier_reads_its_own_kind_of_file(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    snapshot, work = tmp_path / "snapshot", tmp_path / "work"
    snapshot.mkdir()
    db = sqlite3.connect(snapshot / "s.db")
    db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v INTEGER)")
    db.execute("INSERT INTO t VALUES ('a', 1)")
    db.commit()
    db.close()
    (snapshot / "s.json").write_text('{"a": 1}')
    shutil.copytree(snapshot, work)
    db = sqlite3.connect(work / "s.db")
    db.execute("UPDATE t SET v = 2 WHERE id = 'a'")
    db.commit()
    db.close()
    (work / "s.json").write_text('{"a": 2}')
    pinned = {
        name: hashlib.sha256((snapshot / name).read_bytes()).hexdigest()
        for name in ("s.db", "s.json")
    }
    context = VerifierContext(
        "", [], {"id": "q"}, work, 0, snapshot=snapshot, snapshot_hashes=pinned
    )
    table = {
        "type": "sqlite_state",
        "path": "s.db",
        "expected": {"t": {"updated": {"a": {"v": 2}}}},
    }
    result = BuiltVerifier(Verifier.model_validate(table))(context)
    assert (result.passed, result.score) == (True, 1.0)
    assert result.state is not None and result.state["file"] == "s.db" and "tables" in result.state
    document = {"type": "json_state", "path": "s.json", "expected": {"set": {"/a": 2}}}
    result = BuiltVerifier(Verifier.model_validate(document))(context)
    assert (result.passed, result.score) == (True, 1.0)
    assert result.state is not None and result.state["changed"] == {"/a": [1, 2]}
