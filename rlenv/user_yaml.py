"""A user's YAML and text files read defensively: one SpecError naming file:line for bad syntax,
a duplicate key, nesting past MAX_DEPTH, an alias bomb, a value canonical JSON cannot hold, a
file that is missing, not regular, too large or not UTF-8; and the line of a field path in a
composed YAML tree (`line_at`), so every spec error can name its line; a pydantic error said in
words (`describe_error`, at `error_location`).
"""

from __future__ import annotations

import stat
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from rlenv.canonical import MAX_DEPTH, MAX_VALUES, json_problem
from rlenv.errors import SpecError

MAX_SPEC_BYTES = 16 << 20


def line_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk a composed YAML node tree along a pydantic error location; return a 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if key_node.value == part:
                    found = (key_node, value_node)
                    break
            if found is None:
                return line
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def format_loc(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


class _SpecLoader(yaml.SafeLoader):
    """The safe loader, refusing a mapping that gives one key twice (YAML would keep the last)
    and nesting deeper than MAX_DEPTH as soon as it is read (PyYAML's scanner slows down with
    every open flow level, and its composer recurses: 5 000 `[` took seconds, then crashed)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH + 1:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested more than {MAX_DEPTH} levels deep",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                line = key_node.start_mark.line + 1
                if key_node.value in first:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key_node.value!r} (first on line"
                        f" {first[key_node.value]}; YAML would silently keep the last)",
                        key_node.start_mark,
                    )
                first[key_node.value] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, text: str) -> tuple[yaml.Node | None, Any]:
    """Parse a user YAML file into its node tree and value, or raise one SpecError naming
    file:line: bad syntax, a duplicate key, nesting past MAX_DEPTH, an alias bomb, a value
    canonical JSON cannot hold (huge integer, NaN, set, binary)."""
    loader: _SpecLoader | None = None
    try:
        loader = _SpecLoader(text)  # the reader refuses non-printable characters at once
        node = loader.get_single_node()
        raw = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"invalid YAML: {problem}", where=where) from None
    except RecursionError:
        where = f"{path}:{loader.get_mark().line + 1}" if loader else str(path)
        raise SpecError("invalid YAML: nested too deeply", where=where) from None
    finally:
        if loader is not None:
            loader.dispose()
    found = json_problem(raw, also=(date,), max_values=MAX_VALUES)
    if found is not None:
        loc, problem = found
        line = line_at(node, loc)
        where = f"{path}:{line}" if line else str(path)
        raise SpecError(f"{format_loc(loc)}: {problem}", where=where)
    return node, raw


def read_user_text(path: Path, what: str, limit: int = MAX_SPEC_BYTES) -> str:
    """A user's text file, refused in one line when it is missing, not a regular file (a FIFO
    would block the read forever, /dev/zero never end), too large or not UTF-8."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError(f"{what} not found", where=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror}", where=str(path)) from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(f"is a directory, expected a {what}", where=str(path))
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(
            f"not a regular file (FIFO, socket or device), expected a {what}", where=str(path)
        )
    if info.st_size > limit:
        raise SpecError(
            f"{what} is {info.st_size:,} bytes; more than {limit:,} is refused", where=str(path)
        )
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{what} is not UTF-8 text", where=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror}", where=str(path)) from None


def describe_error(error: Any) -> str:
    """A pydantic validation error said in words a spec author reads (the value given, too)."""
    kind = error["type"]
    message = error["msg"]
    if kind == "extra_forbidden":
        return "unknown key (not part of the spec; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if kind in ("literal_error", "enum"):
        return message
    given = error.get("input")
    if isinstance(given, str | int | float | bool) and kind != "missing":
        return f"{message} (got {given!r})"
    return message


def error_location(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union-branch and tagged markers from an error location."""
    return tuple(
        part
        for part in loc
        if not (isinstance(part, str) and (part in ("Fallback", "literal['error']") or "[" in part))
    )


__all__ = [
    "MAX_SPEC_BYTES",
    "describe_error",
    "error_location",
    "format_loc",
    "line_at",
    "read_user_text",
    "read_yaml",
]


def hash_hint(spec_path: Path, raw: Any, loc: tuple[Any, ...], error: Any) -> str:
    """For a missing ``sha256`` whose ``path`` exists: the hash to pin, and how."""
    if error["type"] != "missing" or not loc or loc[-1] != "sha256":
        return ""
    node = raw
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return ""
    relative = node.get("path") if isinstance(node, dict) else None
    if not isinstance(relative, str) or not relative:
        return ""
    from rlenv.canonical import manifest_hash, sha256_file

    target = spec_path.resolve().parent / relative
    try:
        digest = manifest_hash(target) if target.is_dir() else sha256_file(target)
    except OSError:
        return ""
    return f"; {relative} has sha256 {digest} (`rlenv pin {spec_path}` writes it)"
