"""The parts of the code verifiers (rlenv/verifiers/code.py) one at a time: what a user of
``python_tests`` / ``program_cases`` relies on, each stated where it is decided.

This is the fast set `bench/mutants.py` runs against each mutant of code.py: the pure parts
(limits, verdict text, value checks, the comparison) take real data in process; the harness
protocol runs over real pipes with a peer thread at the far end; the env author's tests run in
this process against a real module; only the verdicts that need the model's code to run start
a real sandbox (about 0.2 s each, a few dozen in all). The attack catalog is
tests/test_code_attacks.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
import threading
import time
import types
import unittest
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlenv import sandbox
from rlenv.errors import UserError
from rlenv.sandbox import HARNESS, OUTPUT_LIMIT, SandboxLimits, SandboxResult, probe_mechanism
from rlenv.spec import Verifier
from rlenv.verifiers import code
from rlenv.verifiers.base import VerifierContext
from rlenv.verifiers.code import (
    SolutionError,
    extract_code,
    plain_value,
    run_program_cases,
    run_python_tests,
    sandboxed_grader,
)
from tests.conftest import needs

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=10, memory_mb=256, file_size_mb=8)
MECHANISM = probe_mechanism()
needs_isolation = needs(MECHANISM != "rlimits", "a namespace sandbox (bubblewrap or unshare)")
needs_faketime = needs(sandbox.faketime_library() is not None, "libfaketime")
STOPPED = "the solution's process stopped answering"


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
        ("```py\nx = 1\n```", "x = 1\n"),
        ("```\nx = 2\n```", "x = 2\n"),
        ("```python   \nx = 3\n```", "x = 3\n"),
        ("```python\na = 1\n```\n```python\nb = 2\n```", "a = 1\n"),  # the first block
        ("x = 4\n", "x = 4\n"),  # no fence: the whole answer
        ("```python x = 5```", "```python x = 5```"),  # no newline after the fence: no block
        ("", ""),
        (None, ""),
    ],
)
def test_extract_code(answer: str | None, expected: str) -> None:
    assert extract_code(answer) == expected


def _result(
    returncode: int = 0,
    *,
    timed_out: bool = False,
    killed_by: str | None = None,
    stdout: bytes = b"",
    stderr: bytes = b"",
) -> SandboxResult:
    return SandboxResult(returncode, stdout, stderr, timed_out, killed_by, "bwrap", 0.1)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (_result(-9, timed_out=True, killed_by="wall"), "killed by the wall-clock limit"),
        (_result(-9, timed_out=True), "killed by the wall-clock limit"),
        (_result(-24, killed_by="cpu"), "hit the cpu limit"),
        (_result(1, killed_by="memory"), "hit the memory limit"),
        (_result(-15, killed_by="signal 15"), "killed by signal 15"),
        (_result(3), "exit code 3"),
        (_result(0), "exit code 0"),
    ],
)
def test_limit_reason_names_what_ended_the_run(result: SandboxResult, reason: str) -> None:
    assert code._limit_reason(result) == reason


def test_tail_keeps_the_end_of_the_output_as_text() -> None:
    assert code._tail(b"  \nfirst\nlast line \n\n") == "first\nlast line"
    assert code._tail(b"ab\xffcd") == "ab\ufffdcd"  # undecodable bytes do not raise
    long = b"x" * 500 + b"END"
    assert code._tail(long) == ("x" * 397) + "END"
    assert len(code._tail(long)) == 400
    assert code._tail(long, 5) == "xxEND"
    assert code._tail(b"") == ""


def test_prepare_writes_the_files_as_utf8(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er"
    code._prepare(target, {"solution.py": "print('é')\n", "other.txt": "∑"})
    assert (target / "solution.py").read_bytes() == "print('é')\n".encode()
    assert (target / "other.txt").read_bytes() == "∑".encode()
    code._prepare(target, {"solution.py": "x = 1\n"})  # again: the directory exists already
    assert (target / "solution.py").read_text(encoding="utf-8") == "x = 1\n"


def test_verdict_shape_and_detail_cut() -> None:
    assert code._verdict(True, 1.0, "fine", "bwrap") == {
        "passed": True,
        "score": 1.0,
        "detail": "fine",
        "mechanism": "bwrap",
    }
    long = code._verdict(False, 0.5, "y" * 1999 + "ab" + "z" * 10, "unshare")
    assert long["detail"] == "y" * 1999 + "a"
    assert (long["passed"], long["score"], long["mechanism"]) == (False, 0.5, "unshare")


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


class _Int(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (None, True),
        (True, True),
        (3, True),
        (2.5, True),
        (float("nan"), True),
        ("text", True),
        ([1, "a", None, [2.0]], True),
        ((1, (2, "b")), True),
        ({"a": [1, {"b": None}]}, True),
        ({}, True),
        ([], True),
        (_Int(3), False),  # an always-equal int: a subclass is refused
        (b"bytes", False),
        ({1, 2}, False),
        ({1: "a"}, False),  # keys must be str
        ({"a": object()}, False),
        ([1, object()], False),
        ((1, b"x"), False),
        (object(), False),
        (_nested(50), True),  # the innermost value at depth 50: still read
        (_nested(51), False),  # deeper than 50: refused, never a RecursionError
        ({"k": _nested(50)}, False),
        ({"k": _nested(49)}, True),  # a dict's value is one level down, as a list's item
        ([_nested(49)], True),
    ],
)
def test_plain_value(value: Any, plain: bool) -> None:
    assert plain_value(value) is plain


def test_plain_value_depth_counts_from_the_given_level() -> None:
    assert plain_value(_nested(10), depth=40) is True
    assert plain_value(_nested(11), depth=40) is False
    assert plain_value(5, depth=50) is True
    assert plain_value(5, depth=51) is False


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ValueError", ValueError),
        ("KeyError", KeyError),
        ("ZeroDivisionError", ZeroDivisionError),
        ("AssertionError", AssertionError),
    ],
)
def test_raise_reply_raises_the_builtin_exception(name: str, kind: type[Exception]) -> None:
    with pytest.raises(kind) as raised:
        code._raise_reply({"ok": False, "error_type": name, "error": "x" * 400})
    assert type(raised.value) is kind
    assert raised.value.args == ("x" * 300,)


@pytest.mark.parametrize(
    "name",
    ["SystemExit", "KeyboardInterrupt", "BaseException", "GeneratorExit", "print", "MyError", None],
)
def test_raise_reply_never_raises_what_would_end_the_grader(name: str | None) -> None:
    """SystemExit/KeyboardInterrupt/BaseException named by the solution, or anything that is
    not a builtin Exception, come back as SolutionError: the grader keeps running."""
    with pytest.raises(SolutionError) as raised:
        code._raise_reply({"ok": False, "error_type": name, "error": "bye"})
    assert type(raised.value) is SolutionError
    assert str(raised.value) == "bye"
    with pytest.raises(SolutionError, match="^None$"):
        code._raise_reply({"ok": False})


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("3\n", "3"),
        ("3   \n\n\n", "3"),
        ("a \r\nb\t\r\n", "a\nb"),
        ("  lead\n", "  lead"),  # leading spaces count
        ("a\n\nb\n", "a\n\nb"),  # blank lines inside count
        ("\n\n", ""),
        ("", ""),
    ],
)
def test_normalise_ignores_only_trailing_space(text: str, normal: str) -> None:
    assert code._normalise(text) == normal


def test_clip() -> None:
    assert code._clip("short  \n\n") == "short"
    assert code._clip("x" * 80) == "x" * 80
    assert code._clip("x" * 81) == "x" * 80 + "..."
    assert code._clip("abcdef", 3) == "abc..."
    assert code._clip("abc", 3) == "abc"


def test_short_is_the_last_line_of_the_exception() -> None:
    assert code._short(ValueError("bad\nvalue")) == "ValueError: bad\nvalue".splitlines()[0] + (
        "\nvalue"
    )
    assert code._short(AssertionError()) == "AssertionError"
    assert code._short(KeyError("k" * 400)) == ("KeyError: '" + "k" * 400)[:300]


# --------------------------------------------------------------------------- the protocol


class Peer:
    """The harness's end of a real pipe pair, in a thread: each request line read is passed
    to ``answer``, whose bytes (None: nothing) are written back. The requests are kept."""

    def __init__(self, answer: Callable[[dict[str, Any]], bytes | None]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.request_read, self.request_write = os.pipe()
        self.reply_read, self.reply_write = os.pipe()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with os.fdopen(self.request_read, "rb") as requests:
            for line in requests:
                request = json.loads(line)
                self.requests.append(request)
                reply = self.answer(request)
                if reply is not None:
                    os.write(self.reply_write, reply)

    def channel(self, seconds: float = 10.0) -> Any:
        return code._Channel(self.request_write, self.reply_read, time.monotonic() + seconds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.request_write)
        self.thread.join(timeout=10)
        for fd in (self.reply_read, self.reply_write):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def peer(answer: Callable[[dict[str, Any]], bytes | None]) -> Iterator[Peer]:
    far = Peer(answer)
    try:
        yield far
    finally:
        far.close()


def line(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply).encode() + b"\n"


def echo(request: dict[str, Any]) -> bytes:
    return line({"id": request["id"], "ok": True, "value": request.get("args")})


def test_channel_request_and_reply_carry_one_fresh_id() -> None:
    with peer(echo) as far:
        channel = far.channel()
        assert channel.request({"op": "call", "args": [1]})["value"] == [1]
        assert channel.request({"op": "call", "args": [2]})["value"] == [2]
        first, second = far.requests
        assert first["op"] == "call" and first["args"] == [1]
        assert len(first["id"]) == 16 and first["id"] != second["id"]


def test_channel_reads_a_reply_split_over_several_writes() -> None:
    """A reply longer than one read (65536 bytes) written in pieces is read whole."""

    def pieces(request: dict[str, Any]) -> bytes:
        text = line({"id": request["id"], "ok": True, "value": "x" * 200_000})
        for start in range(0, len(text) - 7, 7000):
            os.write(far.reply_write, text[start : start + 7000][: len(text) - 7 - start])
        return text[-7:]

    with peer(pieces) as far:
        assert far.channel().request({"op": "load"})["value"] == "x" * 200_000


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (lambda r: line({"id": "0" * 16, "ok": True}), "stray output on the protocol pipe"),
        (lambda r: line({"ok": True}), "stray output on the protocol pipe"),
        (lambda r: line([r["id"]]), "stray output on the protocol pipe"),
        (lambda r: b"not json\n", STOPPED),
        (lambda r: b'{"id": "' + r["id"].encode() + b'", "ok": tru\n', STOPPED),
        (lambda r: b"x" * (9 * 1024 * 1024), "reply too long"),
    ],
)
def test_channel_a_bad_reply_breaks_it_for_good(
    reply: Callable[[dict[str, Any]], bytes], message: str
) -> None:
    with peer(reply) as far:
        channel = far.channel()
        with pytest.raises(SolutionError) as raised:
            channel.request({"op": "load"})
        assert str(raised.value) == message
        assert channel.broken == message
        with pytest.raises(SolutionError) as again:  # every later call: the same, unsent
            channel.request({"op": "call"})
        assert str(again.value) == message
        assert len(far.requests) == 1


def test_channel_a_line_after_the_reply_is_kept_for_the_next_request() -> None:
    """Two lines in one write: the first answers, the second is read as the next reply (and,
    its id being stale, breaks the channel): nothing is dropped or merged."""

    def twice(request: dict[str, Any]) -> bytes:
        return line({"id": request["id"], "ok": True, "value": 1}) + line(
            {"id": request["id"], "ok": True, "value": 2}
        )

    with peer(twice) as far:
        channel = far.channel()
        assert channel.request({"op": "call"})["value"] == 1
        assert channel.buffer.startswith(b'{"id"')
        with pytest.raises(SolutionError, match="stray output"):
            channel.request({"op": "call"})


@pytest.mark.timeout(30)  # a channel that ignores its deadline would wait forever
def test_channel_a_silent_peer_fails_at_the_deadline() -> None:
    with peer(lambda request: None) as far:
        channel = far.channel(0.05)
        with pytest.raises(SolutionError, match=f"^{STOPPED}$"):
            channel.request({"op": "load"})
        assert channel.broken == STOPPED
    with peer(echo) as far:  # under a second left: still read
        assert far.channel(0.8).request({"op": "call", "args": [5]})["value"] == [5]
    with peer(echo) as far:  # a deadline already passed: no waiting at all
        channel = far.channel(-1.0)
        with pytest.raises(SolutionError, match=f"^{STOPPED}$"):
            channel.request({"op": "load"})


def test_channel_a_peer_that_hangs_up() -> None:
    with peer(lambda request: None) as far:
        os.close(far.reply_write)  # the far end gone: end of file
        channel = far.channel()
        with pytest.raises(SolutionError, match=f"^{STOPPED}$"):
            channel.request({"op": "load"})
    with peer(echo) as far:
        os.close(far.request_write)  # nobody reads the requests: the write fails
        far.thread.join(timeout=10)
        channel = code._Channel(os.open(os.devnull, os.O_RDONLY), far.reply_read, 1e12)
        os.close(channel.write_fd)
        with pytest.raises(SolutionError, match=f"^{STOPPED}$"):
            channel.request({"op": "load"})
        assert channel.broken == STOPPED


def scripted(replies: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], bytes]:
    """A harness that answers each op (or call name) with a fixed reply."""

    def answer(request: dict[str, Any]) -> bytes:
        key = request.get("name") or request["op"]
        return line({"id": request["id"], **replies[key]})

    return answer


NAMES = {
    "broken": 5,  # first: an entry that is not a dict is skipped, the rest still read
    "add": {"kind": "function"},
    "LIMIT": {"kind": "value", "value": 10},
    "NOTHING": {"kind": "value", "value": None},
    "other": {"kind": "class"},
    "DEEP": {"kind": "value", "value": _nested(60)},  # JSON, but deeper than plain_value reads
}


def test_proxy_module_forwards_calls_and_sets_plain_values() -> None:
    replies = {"add": {"ok": True, "value": 3}}
    with peer(scripted(replies)) as far:
        module = code._proxy_module(far.channel(), NAMES)
        assert module.__name__ == "solution"
        assert module.LIMIT == 10 and module.NOTHING is None
        for missing in ("other", "broken", "DEEP"):
            assert not hasattr(module, missing)
        assert module.add.__name__ == "add" and module.add.__qualname__ == "add"
        assert module.add(1, b=(2, [3])) == 3
        request = far.requests[0]
        assert request["op"] == "call" and request["name"] == "add"
        assert request["args"] == [1] and request["kwargs"] == {"b": [2, [3]]}


@pytest.mark.parametrize(
    ("reply", "kind", "text"),
    [
        ({"ok": False, "error_type": "ValueError", "error": "negative"}, ValueError, "negative"),
        ({"ok": 1, "value": 3}, SolutionError, "None"),  # only ok: true is a value
        ({"value": 3}, SolutionError, "None"),
        ({"ok": "true", "value": 3}, SolutionError, "None"),
    ],
)
def test_proxy_module_raises_what_the_call_raised(
    reply: dict[str, Any], kind: type[Exception], text: str
) -> None:
    with peer(scripted({"add": reply})) as far:
        module = code._proxy_module(far.channel(), NAMES)
        with pytest.raises(kind) as raised:
            module.add(1, 2)
        assert type(raised.value) is kind and str(raised.value) == text


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((object(),), {}), ((1,), {"b": object()}), ((_Int(1),), {}), (({1: 2},), {})],
)
def test_proxy_module_refuses_what_is_not_plain_json(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with peer(scripted({"add": {"ok": True, "value": 3}})) as far:
        module = code._proxy_module(far.channel(), NAMES)
        with pytest.raises(code._Unsupported) as raised:
            module.add(*args, **kwargs)
        assert str(raised.value) == (
            "add() called with a value that is not JSON of plain types; "
            "python_tests passes only None/bool/int/float/str/list/dict"
        )
        assert far.requests == []  # nothing was sent


def test_proxy_module_values_read_back_are_plain_or_refused() -> None:
    """The harness checks what it returns, but it runs beside the model's code, which can
    patch it: the parent checks again (here a value nested deeper than plain_value reads)."""
    with peer(scripted({"add": {"ok": True, "value": {"a": [1, 2.5, None, "x"]}}})) as far:
        module = code._proxy_module(far.channel(), NAMES)
        assert module.add() == {"a": [1, 2.5, None, "x"]}
    with peer(scripted({"add": {"ok": True, "value": _nested(60)}})) as far:
        module = code._proxy_module(far.channel(), NAMES)
        with pytest.raises(SolutionError) as raised:
            module.add()
        assert str(raised.value) == "add() returned a value that is not plain JSON"


# --------------------------------------------------------------------------- the tests' runner


def _solution(source: str) -> types.ModuleType:
    """A real module named ``solution`` (its functions' __module__ is "solution")."""
    module = types.ModuleType("solution")
    exec(compile(textwrap.dedent(source), "solution.py", "exec"), module.__dict__)
    return module


ADD = "def add(a, b):\n    return a + b\n"


def _run(tests: str, source: str = ADD) -> Any:
    tally = code._Tally()
    code._run_tests_here(textwrap.dedent(tests), _solution(source), tally)
    return tally


def test_tally_starts_empty() -> None:
    tally = code._Tally()
    assert (tally.passed, tally.failed, tally.failures) == (0, 0, [])


def test_run_tests_here_test_functions() -> None:
    tally = _run(
        """
        from solution import add

        def helper():
            raise RuntimeError("a helper is not a test")

        def test_one():
            assert add(1, 2) == 3

        def test_two():
            assert add(1, 1) == 3, "one and one"

        def testing_too():
            assert add(0, 0) == 0

        def test_error():
            {}["missing"]

        test_value = 5
        """
    )
    assert (tally.passed, tally.failed) == (2, 2)
    assert tally.failures == [
        "test_two: AssertionError: one and one",
        "test_error: KeyError: 'missing'",
    ]


def test_run_tests_here_module_asserts() -> None:
    held = _run("from solution import add\nassert add(1, 2) == 3\nassert add(2, 2) == 4\n")
    assert (held.passed, held.failed, held.failures) == (1, 0, [])
    broke = _run("from solution import add\nassert add(1, 2) == 3\nassert add(2, 2) == 5\n")
    assert (broke.passed, broke.failed) == (0, 1)
    assert broke.failures == ["loading tests: AssertionError"]


def test_run_tests_here_a_load_error_fails_every_test_it_defined() -> None:
    """Tests that raise while loading count as failed, each test defined before the error
    (functions and unittest cases) as one: a broken file never passes nor scores 0/0."""
    tally = _run(
        """
        import unittest
        from solution import add

        def test_one():
            assert add(1, 2) == 3

        class T(unittest.TestCase):
            def test_a(self):
                pass
            def test_b(self):
                pass

        raise ValueError("the fixture file is missing")
        """
    )
    assert (tally.passed, tally.failed) == (0, 3)
    assert tally.failures == ["loading tests: ValueError: the fixture file is missing"]


def test_run_tests_here_ignores_the_solutions_test_functions() -> None:
    """A solution exporting `test_*` functions has them imported into the test module by a
    star import: they are the solution's, never run as tests (always-passing padding)."""
    source = ADD + "def test_padding():\n    pass\ndef test_more():\n    pass\n"
    tally = _run("from solution import *\n\ndef test_one():\n    assert add(1, 2) == 4\n", source)
    assert (tally.passed, tally.failed) == (0, 1)


def test_run_tests_here_unittest_cases() -> None:
    tally = _run(
        """
        import unittest
        from solution import add

        class T(unittest.TestCase):
            def test_one(self):
                self.assertEqual(add(1, 2), 3)
            def test_two(self):
                self.assertEqual(add(1, 1), 3)
            def test_error(self):
                raise OSError("disk")

            @unittest.skip("later")
            def test_skipped(self):
                pass

            @unittest.expectedFailure
            def test_expected(self):
                self.assertEqual(add(1, 1), 3)

            @unittest.expectedFailure
            def test_unexpected(self):
                self.assertEqual(add(1, 1), 2)

        def test_function():
            assert add(2, 2) == 4
        """
    )
    # passed: test_one, test_expected (failed as expected), test_function; failed: test_two,
    # test_error, the skipped one, the unexpected success
    assert (tally.passed, tally.failed) == (3, 4)
    assert tally.failures == ["test_two: AssertionError: 2 != 3", "test_error: OSError: disk"]


def test_run_suite_counts() -> None:
    class T(unittest.TestCase):
        def test_fail(self) -> None:
            self.fail("x" * 400)

        def test_ok(self) -> None:
            pass

        def test_skip(self) -> None:
            self.skipTest("no")

    tally = code._Tally()
    tally.passed, tally.failed = 5, 7  # added to, not replaced
    code._run_suite(unittest.defaultTestLoader.loadTestsFromTestCase(T), tally)
    assert (tally.passed, tally.failed) == (6, 9)
    assert tally.failures == [("test_fail: AssertionError: " + "x" * 400)[: 300 + 11]]
    assert len(tally.failures[0]) == len("test_fail: ") + 300


def test_run_tests_here_leaves_the_process_as_it_was(capfd: pytest.CaptureFixture[str]) -> None:
    """What the tests print is swallowed; sys.modules' `solution` and `test_solution` are
    what they were before (a module of that name kept, an absent one still absent)."""
    before = types.ModuleType("solution")
    saved = sys.modules.get("solution"), sys.modules.get("test_solution")
    sys.modules["solution"] = before
    sys.modules.pop("test_solution", None)
    try:
        tally = _run(
            "import sys\nimport solution\nprint('from the tests')\n"
            "sys.stdout.write('written')\n"
            "def test_it():\n    assert sys.modules['solution'] is solution\n"
            "    assert sys.modules['test_solution'].__name__ == 'test_solution'\n"
            "    assert solution.add(1, 2) == 3\n"
        )
        assert (tally.passed, tally.failed) == (1, 0), tally.failures
        assert sys.modules["solution"] is before
        assert "test_solution" not in sys.modules
    finally:
        for name, value in zip(("solution", "test_solution"), saved, strict=True):
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value
    out, _ = capfd.readouterr()
    assert "from the tests" not in out and "written" not in out


def test_run_tests_here_survives_tests_that_tidy_sys_modules() -> None:
    """Tests that remove `solution` / `test_solution` from sys.modules themselves still get a
    verdict (the runner's clean-up does not raise on the missing name)."""
    saved = sys.modules.get("solution"), sys.modules.get("test_solution")
    sys.modules.pop("solution", None)
    sys.modules.pop("test_solution", None)
    try:
        tally = _run(
            "import sys\nfrom solution import add\n"
            "def test_it():\n    assert add(1, 2) == 3\n"
            "    del sys.modules['solution'], sys.modules['test_solution']\n"
        )
        assert (tally.passed, tally.failed) == (1, 0), tally.failures
        assert "solution" not in sys.modules and "test_solution" not in sys.modules
    finally:
        for name, value in zip(("solution", "test_solution"), saved, strict=True):
            if value is not None:
                sys.modules[name] = value


# --------------------------------------------------------------------------- in the sandbox

FUNCTIONS = (
    "from solution import add\n\ndef test_small():\n    assert add(1, 2) == 3\n\n"
    "def test_negative():\n    assert add(-1, -2) == -3\n"
)


@needs_isolation
def test_python_tests_a_right_solution(tmp_path: Path) -> None:
    """The model's code and the harness are written into the workdir; the verdict is 2/2."""
    verdict = run_python_tests(ADD, FUNCTIONS, tmp_path / "work", LIMITS)
    assert verdict == {
        "passed": True,
        "score": 1.0,
        "detail": "2/2 tests passed",
        "mechanism": MECHANISM,  # probed when not given
    }
    assert (tmp_path / "work" / "solution.py").read_text(encoding="utf-8") == ADD
    harness = (tmp_path / "work" / code.HARNESS_NAME).read_text(encoding="utf-8")
    assert harness == HARNESS.read_text(encoding="utf-8")


@needs_isolation
@pytest.mark.parametrize(
    ("solution", "tests", "verdict"),
    [
        (  # half right: the failing test is named
            "def add(a, b):\n    return a + b if a > 0 else 0\n",
            FUNCTIONS,
            (False, 0.5, "1/2 tests passed; test_negative: AssertionError"),
        ),
        (  # the process ends at the first call: every test fails, the exit code is told
            "import os\ndef add(a, b):\n    os._exit(5)\n",
            FUNCTIONS,
            (
                False,
                0.0,
                "0/2 tests passed; test_small: rlenv.verifiers.code.SolutionError: "
                f"{STOPPED}; test_negative: rlenv.verifiers.code.SolutionError: {STOPPED}; "
                "exit code 5",
            ),
        ),
        (  # every test held: an odd exit afterwards changes nothing, and is not told
            "import atexit, os\natexit.register(lambda: os._exit(7))\n" + ADD,
            FUNCTIONS,
            (True, 1.0, "2/2 tests passed"),
        ),
        (  # module-level asserts that hold count as one passed test
            ADD,
            "from solution import add\nassert add(1, 2) == 3\n",
            (True, 1.0, "1/1 tests passed"),
        ),
        (  # a single test: one is enough to pass
            ADD,
            "from solution import add\ndef test_one():\n    assert add(1, 2) == 3\n",
            (True, 1.0, "1/1 tests passed"),
        ),
        (
            "raise ValueError('nope')\n",
            FUNCTIONS,
            (False, 0.0, "failed: the solution did not load: ValueError: nope"),
        ),
        (  # the process ends while loading: exit code and what it wrote to stderr
            "import os\nos.write(2, b'bye\\n')\nos._exit(3)\n",
            FUNCTIONS,
            (
                False,
                0.0,
                f"failed: the solution did not load: {STOPPED} (exit code 3); stderr: bye",
            ),
        ),
        (  # ... with exit code 0 and nothing on stderr: neither is told
            "import os\nos._exit(0)\n",
            FUNCTIONS,
            (False, 0.0, f"failed: the solution did not load: {STOPPED}"),
        ),
    ],
)
def test_python_tests_verdicts(
    solution: str, tests: str, verdict: tuple[bool, float, str], tmp_path: Path
) -> None:
    got = run_python_tests(solution, tests, tmp_path, LIMITS, mechanism=MECHANISM)
    assert (got["passed"], got["score"], got["detail"], got["mechanism"]) == (*verdict, MECHANISM)


# The model's code runs in the harness's process and can patch it: here json.dumps, so the
# load reply the parent reads is forged.
FORGE_LOAD = """
import json
_dumps = json.dumps
def dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and "names" in obj:
        obj = {**obj, **FORGED}
    return _dumps(obj, *args, **kwargs)
json.dumps = dumps
def add(a, b):
    return a + b
"""


@needs_isolation
@pytest.mark.parametrize(
    ("forged", "detail"),
    [
        ({"names": ["add"]}, "failed: the solution did not load: None"),
        ({"ok": 1}, "failed: the solution did not load: None"),
        ({"ok": False, "error": "e" * 400}, "failed: the solution did not load: " + "e" * 300),
    ],
)
def test_python_tests_a_forged_load_reply_fails_the_load(
    forged: dict[str, Any], detail: str, tmp_path: Path
) -> None:
    """Only `ok: true` with a dict of names loads; anything else fails the verdict (never
    raises), its error cut to 300 characters."""
    solution = f"FORGED = {forged!r}\n" + FORGE_LOAD
    got = run_python_tests(solution, FUNCTIONS, tmp_path, LIMITS)
    assert (got["passed"], got["score"], got["detail"]) == (False, 0.0, detail)


@needs_isolation
def test_python_tests_names_at_most_twenty_failures(tmp_path: Path) -> None:
    tests = "from solution import add\n" + "".join(
        f"def test_{n:02}():\n    assert add({n}, 0) == -1\n" for n in range(25)
    )
    verdict = run_python_tests(ADD, tests, tmp_path, LIMITS)
    failures = [f"test_{n:02}: AssertionError" for n in range(20)]
    assert verdict["detail"] == "0/25 tests passed; " + "; ".join(failures)
    assert verdict["score"] == 0.0 and verdict["passed"] is False


def test_python_tests_that_do_not_parse_run_nothing(tmp_path: Path) -> None:
    verdict = run_python_tests(ADD, "def f(:\n", tmp_path, LIMITS, mechanism="bwrap")
    assert verdict == {
        "passed": False,
        "score": 0.0,
        "detail": "tests do not parse: invalid syntax (<unknown>, line 1)",
        "mechanism": "bwrap",
    }
    assert not (tmp_path / "solution.py").exists()


@needs_isolation
def test_hidden_paths_stay_hidden_from_the_code(tmp_path: Path) -> None:
    """`hidden` reaches the sandbox in both verifiers: a file inside the workdir that is
    hidden is not there for the code (it is without `hidden`, the control)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "gold.txt").write_text("42")
    solution = "import os\ndef seen():\n    return os.path.exists('gold.txt')\n"
    tests = "from solution import seen\ndef test_it():\n    assert seen() is False\n"
    hidden = [work / "gold.txt"]
    assert run_python_tests(solution, tests, work, LIMITS, hidden)["passed"] is True
    assert run_python_tests(solution, tests, work, LIMITS)["passed"] is False
    printer = "import os\nprint(os.path.exists('gold.txt'))\n"
    cases = [{"stdin": "", "expected_stdout": "False"}]
    assert run_program_cases(printer, cases, work, LIMITS, hidden)["passed"] is True
    assert run_program_cases(printer, cases, work, LIMITS)["passed"] is False


def _other_mechanism() -> str | None:
    others = [m for m in ("unshare", "bwrap") if m != MECHANISM and sandbox._mechanism_works(m)]
    return others[0] if others else None


@needs_isolation
def test_the_given_mechanism_is_the_one_used(tmp_path: Path) -> None:
    """With `mechanism` given, the code runs under that one (bwrap shows the workdir as
    /sandbox, unshare at its host path) and the verdict names it."""
    other = _other_mechanism()
    if other is None:
        pytest.skip("only one isolating mechanism works here")
    work = (tmp_path / "work").resolve()
    work.mkdir()
    where = {"bwrap": sandbox.SANDBOX_WORKDIR, "unshare": str(work)}
    cases = [{"stdin": "", "expected_stdout": where[other]}]
    verdict = run_program_cases(
        "import os\nprint(os.getcwd())\n", cases, work, LIMITS, mechanism=other
    )
    assert (verdict["passed"], verdict["mechanism"]) == (True, other), verdict
    tests = f"from solution import cwd\ndef test_it():\n    assert cwd() == {where[other]!r}\n"
    solution = "import os\ndef cwd():\n    return os.getcwd()\n"
    verdict = run_python_tests(solution, tests, work, LIMITS, mechanism=other)
    assert (verdict["passed"], verdict["mechanism"]) == (True, other), verdict


def test_a_sandbox_that_cannot_start_is_a_failed_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError starting the sandbox (a missing or broken bwrap) fails the verdict with its
    reason; it never raises into the run."""

    def cannot_start(*args: Any, **kwargs: Any) -> SandboxResult:
        raise PermissionError(13, "Permission denied", "bwrap")

    monkeypatch.setattr(code, "run_sandboxed", cannot_start)
    verdict = run_python_tests(ADD, FUNCTIONS, tmp_path, LIMITS, mechanism="bwrap")
    assert verdict == {
        "passed": False,
        "score": 0.0,
        "detail": "sandbox could not start: [Errno 13] Permission denied: 'bwrap'",
        "mechanism": "bwrap",
    }
    cases = [{"stdin": "1", "expected_stdout": "1"}, {"stdin": "2", "expected_stdout": "2"}]
    verdict = run_program_cases("print(input())", cases, tmp_path, LIMITS, mechanism="bwrap")
    assert verdict["detail"] == (
        "0/2 cases passed; case 0: sandbox could not start: [Errno 13] Permission denied: "
        "'bwrap'; case 1: sandbox could not start: [Errno 13] Permission denied: 'bwrap'"
    )
    assert (verdict["passed"], verdict["score"]) == (False, 0.0)


ADDER = textwrap.dedent(
    """
    import sys
    x = sys.stdin.read().split()
    if x[0] == '9':
        sys.stderr.write('first\\n' + 'e' * 300 + 'bad input\\n')
        sys.exit(4)
    print(int(x[0]) + int(x[1]) + (x[0] == '5'))
    """
)


@needs_isolation
def test_program_cases_each_case_judged_and_told(tmp_path: Path) -> None:
    cases = [
        {"stdin": "1 2", "expected_stdout": "3"},
        {"stdin": "5 5", "expected_stdout": "10\n"},
        {"stdin": "9 9", "expected_stdout": "18"},
        {"stdin": "2 2\n", "expected_stdout": "4  \r\n\n"},  # trailing space and lines ignored
    ]
    verdict = run_program_cases(ADDER, cases, tmp_path / "work", LIMITS)
    stderr = ("e" * 300 + "bad input")[-200:]
    assert verdict == {
        "passed": False,
        "score": 0.5,
        "detail": "2/4 cases passed; case 1: wrong answer: expected '10', got '11'; "
        f"case 2: exit code 4 ({stderr})",
        "mechanism": MECHANISM,
    }
    assert (tmp_path / "work" / "solution.py").read_text(encoding="utf-8") == ADDER
    assert run_program_cases(ADDER, [cases[0], cases[3]], tmp_path, LIMITS)["passed"] is True


@needs_isolation
def test_program_cases_defaults_and_long_answers(tmp_path: Path) -> None:
    """A case without stdin reads nothing; one without expected_stdout expects nothing; an
    expected answer longer than the usual output cap (and not ASCII) is read whole."""
    long = "é" * (OUTPUT_LIMIT // 2 + 100)  # more bytes than OUTPUT_LIMIT in UTF-8
    program = textwrap.dedent(
        f"""
        import sys
        data = sys.stdin.read()
        times = {{"long": 1, "huge": 3}}.get(data)
        print(repr(data) if times is None else "é" * {len(long)} * times)
        """
    )
    cases = [
        {},
        {"stdin": "long", "expected_stdout": long},
        {"expected_stdout": "''"},
        {"stdin": "huge", "expected_stdout": long},  # over the cap: twice the answer + 1 KiB
    ]
    verdict = run_program_cases(program, cases, tmp_path, LIMITS)
    cap = 2 * len(long.encode("utf-8")) + 1024
    assert verdict["detail"] == (
        "2/4 cases passed; case 0: wrong answer: expected '', got \"''\"; "
        f"case 3: output longer than {cap} bytes, cut there"
    )
    silent = run_program_cases("pass\n", [{"stdin": "x"}], tmp_path, LIMITS)
    assert (silent["passed"], silent["detail"]) == (True, "1/1 cases passed")


def test_program_cases_without_cases_runs_nothing(tmp_path: Path) -> None:
    verdict = run_program_cases(ADD, [], tmp_path / "none", LIMITS, mechanism="unshare")
    assert verdict == {
        "passed": False,
        "score": 0.0,
        "detail": "no test cases",
        "mechanism": "unshare",
    }
    assert not (tmp_path / "none").exists()


@needs_isolation
def test_program_cases_wrong_answers_are_clipped(tmp_path: Path) -> None:
    cases = [{"stdin": "", "expected_stdout": "y" * 100 + "\n"}]
    verdict = run_program_cases("print('x' * 100)\n", cases, tmp_path, LIMITS)
    assert verdict["detail"] == (
        f"0/1 cases passed; case 0: wrong answer: expected {'y' * 80 + '...'!r}, "
        f"got {'x' * 80 + '...'!r}"
    )


# --------------------------------------------------------------------------- the grader


def _config(kind: str, **options: Any) -> Verifier:
    return Verifier.model_validate(
        {"type": kind, "name": "unit", "expected_field": "tests", "options": options}
    )


def _context(
    workdir: Path, answer: str, material: Any, frozen_time: str | None = None
) -> VerifierContext:
    return VerifierContext(
        answer=answer,
        messages=[],
        input={"tests": material},
        workdir=workdir,
        seed=0,
        frozen_time=frozen_time,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"cpu_seconds": 2, "network": True},
            "verifier 'unit': unknown sandbox option(s) ['network']",
        ),
        ({"gpu": 1, "cpu": 2}, "verifier 'unit': unknown sandbox option(s) ['cpu', 'gpu']"),
        ({"cpu_seconds": 0}, "verifier 'unit': option cpu_seconds is 0, not a positive number"),
        ({"memory_mb": -5}, "verifier 'unit': option memory_mb is -5, not a positive number"),
        (
            {"wall_seconds": True},
            "verifier 'unit': option wall_seconds is True, not a positive number",
        ),
        ({"disk_mb": "64"}, "verifier 'unit': option disk_mb is '64', not a positive number"),
        (
            {"max_processes": 4, "file_size_mb": "m" * 60},
            "verifier 'unit': option file_size_mb is '" + "m" * 39 + ", not a positive number",
        ),
        (
            {"wall_seconds": None},
            "verifier 'unit': option wall_seconds is None, not a positive number",
        ),
    ],
)
def test_grader_refuses_bad_options_when_built(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as raised:
        sandboxed_grader(_config("python_tests", **options))
    assert str(raised.value) == message


def test_grader_accepts_every_limit_as_a_positive_number() -> None:
    options = {
        "cpu_seconds": 1,
        "wall_seconds": 0.5,
        "memory_mb": 64,
        "file_size_mb": 1,
        "max_processes": 2,
        "disk_mb": 8,
    }
    assert callable(sandboxed_grader(_config("program_cases", **options)))


@pytest.mark.parametrize("allowed", [None, "", "0", "yes", "true"])
def test_grader_refuses_a_weak_sandbox_unless_allowed(
    allowed: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only rlimits here (the probe forced): refused unless RLENV_ALLOW_WEAK_SANDBOX is
    exactly 1, with the way out in the message."""
    monkeypatch.setattr(code, "probe_mechanism", lambda: "rlimits")
    if allowed is None:
        monkeypatch.delenv("RLENV_ALLOW_WEAK_SANDBOX", raising=False)
    else:
        monkeypatch.setenv("RLENV_ALLOW_WEAK_SANDBOX", allowed)
    grade = sandboxed_grader(_config("program_cases"))
    with pytest.raises(RuntimeError) as raised:
        grade(_context(tmp_path, "print(3)", [{"stdin": "", "expected_stdout": "3"}]))
    assert str(raised.value) == (
        "verifier 'unit': refusing to run model code with no namespace sandbox (neither "
        "bubblewrap nor unshare works here); install bubblewrap (scripts/system-deps.sh), or "
        "pass --allow-weak-sandbox (or set RLENV_ALLOW_WEAK_SANDBOX=1) to accept rlimits only"
    )


def test_grader_runs_on_a_weak_sandbox_when_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code, "probe_mechanism", lambda: "rlimits")
    monkeypatch.setenv("RLENV_ALLOW_WEAK_SANDBOX", "1")
    grade = sandboxed_grader(_config("program_cases"))
    _, _, detail = grade(_context(tmp_path, "print(3)", [{"stdin": "", "expected_stdout": "3"}]))
    # it ran (as root, the rlimits-only child may not be let into the interpreter)
    assert detail is not None and detail.split(";")[0] in ("1/1 cases passed", "0/1 cases passed")


@needs_isolation
def test_grader_python_tests_on_a_copy_of_the_workdir(tmp_path: Path) -> None:
    """The fenced code runs against the input's tests on a copy of the workdir: its files are
    there to read; a symlink in it is copied as a link (never the file it points to outside,
    which the sandbox does not show); what the code writes stays in the copy."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "gold.txt").write_text("the gold")
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("7")
    (work / "link.txt").symlink_to(outside / "gold.txt")
    answer = (
        "Here you go:\n```python\nimport os\n"
        "def add(a, b):\n    open('written.txt', 'w').write('x')\n"
        "    return a + b + int(open('data.txt').read()) - 7\n"
        "def gold():\n    return os.path.exists('link.txt'), os.path.islink('link.txt')\n```\n"
    )
    tests = (
        FUNCTIONS
        + "def test_gold():\n    from solution import gold\n    assert gold() == [False, True]\n"
    )
    grade = sandboxed_grader(_config("python_tests", cpu_seconds=2, wall_seconds=10))
    assert grade(_context(work, answer, tests)) == (True, 1.0, "3/3 tests passed")
    assert sorted(p.name for p in work.iterdir()) == ["data.txt", "link.txt"]
    assert os.path.islink(work / "link.txt")
    failing = grade(_context(work, answer.replace("- 7", "- 6"), tests))
    assert failing[:2] == (False, 1 / 3)


@needs_isolation
@needs_faketime
def test_grader_program_cases_read_the_frozen_clock_and_the_limits(tmp_path: Path) -> None:
    """program_cases through the grader: the input's cases, the rollout's frozen instant
    inside (a workdir that does not exist is an empty one), the verifier's limits applied."""
    clock = "import time\nprint(int(time.time()) // 100)\n"
    cases = [{"stdin": "", "expected_stdout": "17145648"}]  # 2024-05-01T12:00:00Z // 100
    grade = sandboxed_grader(_config("program_cases"))
    missing = tmp_path / "never-made"
    frozen = "2024-05-01T12:00:00+00:00"
    assert grade(_context(missing, clock, cases, frozen)) == (True, 1.0, "1/1 cases passed")
    writer = "open('big', 'wb').write(b'x' * (3 * 1024 * 1024))\nprint('done')\n"
    small = sandboxed_grader(_config("program_cases", file_size_mb=1))
    passed, score, detail = small(_context(tmp_path, writer, [{"expected_stdout": "done"}]))
    assert (passed, score) == (False, 0.0)
    assert detail is not None and detail.startswith(
        "0/1 cases passed; case 0: hit the file_size limit"
    )
    assert grade(_context(tmp_path, writer, [{"expected_stdout": "done"}]))[0] is True


@needs_isolation
def test_program_cases_an_output_cut_at_the_cap_is_not_judged_on_its_start(
    tmp_path: Path,
) -> None:
    """Found by mutation testing: stdout past the cap was cut and the kept start compared,
    so the right answer followed by a cap's worth of spaces and then anything (another
    answer, a traceback) passed. A cut output fails its case, naming the cap."""
    program = "print(3)\nprint(' ' * 70000)\nprint('and 10 and 42')\n"
    verdict = run_program_cases(program, [{"stdin": "", "expected_stdout": "3"}], tmp_path, LIMITS)
    assert verdict["passed"] is False, verdict
    assert verdict["detail"] == (
        f"0/1 cases passed; case 0: output longer than {OUTPUT_LIMIT} bytes, cut there"
    )
    spaces = "print(3)\nprint(' ' * 1000)\n"  # trailing space within the cap: still ignored
    assert run_program_cases(spaces, [{"expected_stdout": "3"}], tmp_path, LIMITS)["passed"]


@needs_isolation
def test_program_cases_output_that_is_not_utf8_is_a_wrong_answer(tmp_path: Path) -> None:
    program = "import sys\nsys.stdout.buffer.write(b'3\\xff\\n')\n"
    verdict = run_program_cases(program, [{"expected_stdout": "3"}], tmp_path, LIMITS)
    assert (
        verdict["detail"] == "0/1 cases passed; case 0: wrong answer: expected '3', got '3\ufffd'"
    )
