"""Held-out inputs: a JSONL (or CSV) file of records with unique ids, pinned by hash in the
spec; the conversation each starts from (system prompt, few-shot examples, the prompt or a
template over the record's fields); choosing inputs by id or field."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlenv.errors import SpecError, UserError
from rlenv.jsonl import read_objects


class EnvInput:
    """One held-out input: its position in the file, its id and its fields (`data`).

    Read from a JSONL file, an input keeps its line and parses it again whenever `data` is
    asked for (about 1 µs for a small record): 10,000 parsed records held 4.3 MB of the
    orchestrator for a whole run (issue 30's peak memory), their lines 1.2 MB. So `data` is a
    fresh dict at each access: read it once where it is read several times."""

    __slots__ = ("index", "id", "_data", "_line", "_own_file")
    index: int
    id: str
    _data: dict[str, Any] | None
    _line: str | None
    _own_file: bool

    def __init__(
        self,
        index: int,
        id: str,  # noqa: A002 - the input's field name
        data: dict[str, Any] | None = None,
        *,
        line: str | None = None,
        own_file: bool = False,
    ) -> None:
        if (data is None) == (line is None):
            raise TypeError("EnvInput takes its data or its JSON line, one of them")
        for name, value in (
            ("index", index),
            ("id", id),
            ("_data", data),
            ("_line", line),
            ("_own_file", own_file),
        ):
            object.__setattr__(self, name, value)

    @property
    def data(self) -> dict[str, Any]:
        if self._data is not None:
            return self._data
        from rlenv.jsonl import parse_json_line

        parsed: dict[str, Any] = parse_json_line(str(self._line), own_file=self._own_file)
        return parsed

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"EnvInput is read-only: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EnvInput):
            return NotImplemented
        return (self.index, self.id, self.data) == (other.index, other.id, other.data)

    __hash__ = None  # type: ignore[assignment]  # its data is a dict, as it always was

    def __repr__(self) -> str:
        return f"EnvInput(index={self.index!r}, id={self.id!r}, data={self.data!r})"

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.index, self.id, self._data, self._line, self._own_file)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            object.__setattr__(self, name, value)

    def messages(self, system_prompt: str | None, prompt: Any = None) -> list[dict[str, Any]]:
        """The conversation the policy starts from (reference fields stay hidden).

        `prompt` is the spec's prompt template (``template`` and ``few_shot``), if any: the
        examples become user/assistant turns and the user message is the template rendered
        over this record's fields; without it, the record's ``messages`` or ``prompt``.
        """
        messages: list[dict[str, Any]] = []
        data = self.data
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if prompt is not None:
            for example in prompt.few_shot:
                messages.append({"role": "user", "content": render(prompt.template, example.input)})
                messages.append({"role": "assistant", "content": example.answer})
            messages.append({"role": "user", "content": render(prompt.template, data)})
        elif "messages" in data:
            messages.extend(dict(message) for message in data["messages"])
        else:
            messages.append({"role": "user", "content": data["prompt"]})
        return messages


@lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
    )
    return environment.from_string(template)


def render(template: str, fields: dict[str, Any]) -> str:
    """A prompt template (jinja2, sandboxed: no attribute tricks, no I/O) over input fields;
    an undefined field or a template error raises ValueError naming it."""
    from jinja2 import TemplateError

    try:
        return str(_compiled(template).render(**fields))
    except TemplateError as exc:
        raise ValueError(f"prompt.template: {exc}") from None


def check_templates(records: list[EnvInput], prompt: Any, where: str) -> None:
    """Every input (and few-shot example) renders: a missing field is found by validate, not
    by the run."""
    if prompt is None:
        return
    for index, example in enumerate(prompt.few_shot):
        try:
            render(prompt.template, example.input)
        except ValueError as exc:
            raise SpecError(f"prompt.few_shot[{index}]: {exc}", where=where) from None
    for record in records:
        try:
            render(prompt.template, record.data)
        except ValueError as exc:
            raise SpecError(f"input {record.id!r}: {exc}", where=where) from None


def select(
    records: list[EnvInput],
    *,
    ids: list[str] | None = None,
    where: dict[str, str] | None = None,
    limit: int | None = None,
) -> list[EnvInput]:
    """The inputs a run covers: those named by `ids` (in file order), those whose fields equal
    every `where` value (compared as text), then the first `limit` of them."""
    chosen = records
    if ids:
        known = {record.id for record in records}
        unknown = [input_id for input_id in ids if input_id not in known]
        if unknown:
            raise UserError(f"--ids: no input with id {unknown[0]!r} ({len(unknown)} unknown)")
        wanted = set(ids)
        chosen = [record for record in chosen if record.id in wanted]
    if where:
        chosen = [record for record in chosen if _matches(record.data, where)]
        if not chosen:
            shown = ", ".join(f"{field}={value}" for field, value in where.items())
            raise UserError(f"--where {shown}: no input matches")
    return chosen[:limit] if limit else chosen


def _matches(data: dict[str, Any], where: dict[str, str]) -> bool:
    return all(field in data and _as_text(data[field]) == value for field, value in where.items())


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_where(entries: list[str]) -> dict[str, str]:
    """``["kind=date", "lang=en"]`` -> {"kind": "date", "lang": "en"}; a one-line error
    otherwise."""
    parsed: dict[str, str] = {}
    for entry in entries:
        field, sep, value = entry.partition("=")
        if not sep or not field.strip():
            raise UserError(f"--where {entry!r}: expected FIELD=VALUE")
        parsed[field.strip()] = value
    return parsed


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """("file:line", row) of a CSV inputs file with a header row; every value is text."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames:
                return
            for row in reader:
                where = f"{path}:{reader.line_num}"
                if None in row or any(value is None for value in row.values()):
                    raise SpecError(
                        f"row has {len(row) - (None in row)} fields where the header has"
                        f" {len(reader.fieldnames)}",
                        where=where,
                    )
                yield where, dict(row)
    except UnicodeDecodeError:
        raise SpecError("inputs file is not UTF-8 text", where=str(path)) from None
    except csv.Error as exc:
        raise SpecError(f"invalid CSV: {exc}", where=str(path)) from None


def _objects(path: Path, rows: bool, texts: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """("file:line", object) for every non-blank line of a JSONL inputs file, as
    `rlenv.jsonl.read_objects` gives them, each line put in `texts` under its "file:line"
    (`EnvInput` keeps it, not the object). A file it would refuse, it refuses (its own error)."""
    from rlenv.jsonl import json_lines, parse_json_line

    def refused() -> SpecError:
        for _ in read_objects(path, what="inputs file", error=SpecError, own_file=rows):
            pass
        return SpecError("inputs file changed while it was read", where=str(path))

    try:
        numbered = list(json_lines(path))
    except (OSError, UnicodeDecodeError):
        raise refused() from None
    for number, line in numbered:
        if not line.strip():
            continue
        try:
            data = parse_json_line(line, own_file=rows)
        except ValueError:
            raise refused() from None
        if not isinstance(data, dict):
            raise refused()
        where = f"{path}:{number}"
        texts[where] = line
        yield where, data


def load_inputs(path: Path, *, templated: bool = False, rows: bool = False) -> list[EnvInput]:
    """Parse and check the inputs file; every problem names file:line. With a prompt template
    (`templated`) a record needs no ``prompt`` of its own. With `rows` the file is a datasets
    split's rows as rlenv wrote them (:func:`dataset_rows`, canonical JSON: a float column's
    1e20 is written 100000000000000000000, read back as the float)."""
    records: list[EnvInput] = []
    seen: dict[str, int] = {}
    texts: dict[str, str] = {}  # "file:line" -> the line, of a JSONL file
    lines = _rows(path) if path.suffix.lower() == ".csv" else _objects(path, rows, texts)
    for where, data in lines:
        raw_id = data.get("id")
        if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
            raise SpecError("each input needs an 'id' (non-empty string or integer)", where=where)
        input_id = str(raw_id)
        if input_id in seen:
            raise SpecError(
                f"duplicate input id {input_id!r} (first on line {seen[input_id]})", where=where
            )
        seen[input_id] = int(where.rsplit(":", 1)[1])
        if "messages" in data:
            if not isinstance(data["messages"], list) or not all(
                isinstance(message, dict) and "role" in message for message in data["messages"]
            ):
                raise SpecError("'messages' must be a list of {role, content} objects", where=where)
        elif not templated and not isinstance(data.get("prompt"), str):
            raise SpecError("each input needs a 'prompt' string or a 'messages' list", where=where)
        line = texts.pop(where, None)
        if line is None:
            records.append(EnvInput(index=len(records), id=input_id, data=data))
        else:
            records.append(EnvInput(len(records), input_id, line=line, own_file=rows))
    if not records:
        raise SpecError("inputs file has no records", where=str(path))
    return records


def dataset_rows(source: Any, root: Path) -> bytes:
    """A `datasets` split (the spec's ``inputs.dataset``) as JSONL bytes, one canonical JSON
    object per row with an ``id`` (``id_field``, else an ``id`` column, else the row number);
    their sha256 is what the spec pins. A hub dataset is read from the local hub cache at its
    commit only: nothing is downloaded. Every problem is one SpecError naming the dataset."""
    from rlenv.canonical import canonical_bytes, json_problem

    label = f"dataset {source.name or source.path!r} split {source.split!r}"
    table = _load_split(source, root, label)
    id_field = source.id_field or ("id" if "id" in table.column_names else None)
    if id_field is not None and id_field not in table.column_names:
        raise SpecError(
            f"{label}: no column {id_field!r} for id_field (columns: "
            f"{', '.join(table.column_names)})"
        )
    lines: list[bytes] = []
    for number, row in enumerate(table):
        data = dict(row)
        if id_field is not None:
            data["id"] = data[id_field]
        else:
            data["id"] = number
        problem = json_problem(data)
        if problem:
            at = ".".join(str(part) for part in problem[0])
            raise SpecError(f"{label}: row {number}, {at}: {problem[1]}")
        lines.append(canonical_bytes(data) + b"\n")
    if not lines:
        raise SpecError(f"{label}: the split has no rows")
    return b"".join(lines)


def _load_split(source: Any, root: Path, label: str) -> Any:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # inputs are read, never fetched
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise SpecError(
            f"{label}: reading a datasets split needs the `datasets` package"
            " (pip install 'rlenv[datasets]')"
        ) from None
    datasets.disable_progress_bars()
    if source.name is not None:
        from huggingface_hub import snapshot_download

        try:
            directory = Path(
                snapshot_download(
                    source.name,
                    repo_type="dataset",
                    revision=source.revision,
                    local_files_only=True,
                )
            )
        except Exception:
            raise SpecError(
                f"{label}: revision {source.revision[:12]}… is not in the local Hugging Face"
                " cache (HF_HUB_CACHE); download it once where there is network"
                " (`huggingface-cli download --repo-type dataset NAME --revision REV`)"
            ) from None
    else:
        directory = (root / source.path).resolve()
        if not directory.exists():
            raise SpecError(f"{label}: directory not found: {directory}")
    try:
        if (directory / "dataset_dict.json").is_file() or (directory / "state.json").is_file():
            loaded = datasets.load_from_disk(str(directory))
            if isinstance(loaded, datasets.DatasetDict):
                if source.split not in loaded:
                    raise SpecError(f"{label}: no such split (splits: {', '.join(sorted(loaded))})")
                loaded = loaded[source.split]
            return loaded
        return datasets.load_dataset(str(directory), source.config, split=source.split)
    except SpecError:
        raise
    except Exception as exc:  # the library's own message (and its cause's), on one line
        cause = exc.__cause__ or exc.__context__
        message = str(exc) + (f" ({type(cause).__name__}: {cause})" if cause else "")
        message = " ".join(message.split())[:400]
        raise SpecError(f"{label}: cannot load: {type(exc).__name__}: {message}") from None
