"""`rlenv pin SPEC`: write every missing or stale hash into the spec at once.

The spec is edited as text, not re-dumped: each ``sha256:`` value is replaced where it stands
(or a ``sha256:`` line/entry is added beside its ``path:``), so comments, key order, quoting and
flow style are kept byte for byte everywhere else. It works on a spec that does not validate yet
(a missing or malformed hash is what it repairs); it refuses YAML it cannot read and files that
do not exist, listing every one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlenv.canonical import manifest_hash, sha256_file
from rlenv.errors import SpecError, UserError
from rlenv.files import atomic_write

# (field path in the spec, how its `path` is hashed); tools[*] expands to every tool
PINNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("inputs",), "file"),
    (("train_inputs",), "file"),
    (("snapshot",), "directory"),
    (("tools", "*", "cassette"), "file"),
    (("verifiers", "*", "judge", "cassette"), "file"),
    (("user", "cassette"), "file"),
    (("reward_model", "train_data"), "file"),
    (("reward_model", "training_prompts"), "file"),
    (("reward_model", "training_pairs"), "file"),
)
HASHERS: dict[str, Callable[[Path], str]] = {"file": sha256_file, "directory": manifest_hash}


@dataclass
class Pin:
    field: str  # e.g. "tools[0].cassette"
    path: str
    old: str | None
    new: str
    file: str = ""  # the base spec it is pinned in ("" for the spec itself)

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass
class PinResult:
    spec: Path
    pins: list[Pin]
    written: bool
    waiting: list[str] = field(default_factory=list)  # files `rlenv record` will write


RECORDED = ("tools[", "verifiers[", "user.")  # cassettes: written by `rlenv record`, fine to lack


def _judge_mode(root: yaml.Node, name: str) -> str:
    """The judge's mode for a ``verifiers[i].judge.cassette`` target ("replay" by default)."""
    index = int(name.split("[", 1)[1].split("]", 1)[0])
    verifiers = _value(root, "verifiers")
    if not isinstance(verifiers, yaml.SequenceNode) or index >= len(verifiers.value):
        return "replay"
    mode = _value(_value(verifiers.value[index], "judge"), "mode")
    return mode.value if isinstance(mode, yaml.ScalarNode) else "replay"


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None


def _key(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node
    return None


def _targets(root: yaml.Node) -> Iterator[tuple[str, yaml.MappingNode, str]]:
    """(field name, its mapping node, hash kind) for every pinnable file the spec names."""
    for loc, kind in PINNED:
        nodes: list[tuple[str, yaml.Node | None]] = [("", root)]
        for part in loc:
            expanded: list[tuple[str, yaml.Node | None]] = []
            for name, node in nodes:
                if part == "*":
                    if isinstance(node, yaml.SequenceNode):
                        expanded += [(f"{name}[{i}]", item) for i, item in enumerate(node.value)]
                else:
                    expanded.append((f"{name}.{part}" if name else part, _value(node, part)))
            nodes = expanded
        for name, node in nodes:
            if isinstance(node, yaml.MappingNode):
                yield name, node, kind


def plan(
    spec_path: str | Path, waiting: list[str] | None = None, *, variant: bool = False
) -> tuple[str, list[tuple[Pin, yaml.MappingNode]]]:
    """The spec text and, for every file it names, the hash it should pin. A cassette that does
    not exist yet (`rlenv record` writes it) and a judge cassette that grows as it judges
    (mode record_missing or live) are not pinned: they are named in `waiting`. In a `variant`
    (a spec with ``extends``), a mapping without ``path`` keeps its base's file and hash."""
    waiting = waiting if waiting is not None else []
    spec = Path(spec_path)
    if not spec.is_file():
        raise SpecError("spec file not found", where=str(spec))
    try:
        text = spec.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec: {exc}", where=str(spec)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{spec}:{mark.line + 1}" if mark else str(spec)
        raise SpecError(
            f"invalid YAML: {getattr(exc, 'problem', None) or exc}", where=where
        ) from None
    if not isinstance(root, yaml.MappingNode):
        raise SpecError("expected a mapping of fields at the top level", where=str(spec))
    base = spec.resolve().parent
    found: list[tuple[Pin, yaml.MappingNode]] = []
    problems: list[UserError] = []
    for name, node, kind in _targets(root):
        path_node = _value(node, "path")
        where = f"{spec}:{node.start_mark.line + 1}"
        dataset_node = _value(node, "dataset")
        if kind == "file" and path_node is None and isinstance(dataset_node, yaml.MappingNode):
            try:
                label, digest = _dataset_hash(name, dataset_node, base)
            except UserError as exc:
                problems.append(exc if exc.where else SpecError(str(exc), where=where))
                continue
            old_node = _value(node, "sha256")
            old = old_node.value if isinstance(old_node, yaml.ScalarNode) else None
            found.append((Pin(name, label, old or None, digest), node))
            continue
        if variant and path_node is None and dataset_node is None:
            continue  # the base names the file; its hash is pinned there
        if not isinstance(path_node, yaml.ScalarNode) or not path_node.value:
            problems.append(SpecError(f"{name}.path: missing, nothing to pin", where=where))
            continue
        where = f"{spec}:{path_node.start_mark.line + 1}"
        target = base / path_node.value
        exists = target.is_dir() if kind == "directory" else target.is_file()
        if name.startswith("verifiers[") and _judge_mode(root, name) != "replay":
            mode = _judge_mode(root, name)
            waiting.append(
                f"{name}: judge mode {mode}: the cassette grows as it judges; not pinned"
            )
            continue
        if not exists and name.startswith(RECORDED):
            waiting.append(
                f"{name}: {path_node.value} does not exist yet; `rlenv record` writes it"
            )
            continue
        if not exists:
            what = "directory" if kind == "directory" else "file"
            problems.append(SpecError(f"{name}.path: {what} not found: {target}", where=where))
            continue
        if kind == "directory" and target.resolve() in spec.resolve().parents:
            problems.append(  # pinning would change the hash it pins: never settled
                SpecError(f"{name}.path: {target} holds the spec itself; move it out", where=where)
            )
            continue
        old_node = _value(node, "sha256")
        old = old_node.value if isinstance(old_node, yaml.ScalarNode) else None
        found.append((Pin(name, path_node.value, old or None, HASHERS[kind](target)), node))
    if problems:
        raise _many(problems)
    return text, found


def _dataset_hash(name: str, node: yaml.MappingNode, base: Path) -> tuple[str, str]:
    """What a datasets split is called and the sha256 its rows pin (``inputs.dataset``)."""
    from pydantic import ValidationError

    from rlenv.canonical import sha256_bytes
    from rlenv.inputs import dataset_rows
    from rlenv.spec import DatasetSplit

    try:
        source = DatasetSplit(**yaml.SafeLoader("").construct_document(node))
    except (TypeError, ValidationError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise SpecError(f"{name}.dataset: {first}") from None
    label = f"{source.name or source.path} [{source.split}]"
    try:
        return label, sha256_bytes(dataset_rows(source, base))
    except SpecError as exc:
        raise SpecError(f"{name}.{exc.message}") from None


def _many(problems: list[UserError]) -> UserError:
    from rlenv.errors import Problems

    return problems[0] if len(problems) == 1 else Problems(problems)


def _edit(text: str, node: yaml.MappingNode, digest: str) -> str:
    """`text` with the mapping's sha256 set to `digest` (replaced in place, or added)."""
    old = _value(node, "sha256")
    if old is not None:
        start, end = old.start_mark.index, old.end_mark.index
        return text[:start] + digest + text[end:]
    if node.flow_style:
        close = text.rindex("}", node.start_mark.index, node.end_mark.index)
        body = text[node.start_mark.index + 1 : close].strip()
        sep = ", " if body else ""
        return text[:close].rstrip() + f"{sep}sha256: {digest}" + text[close:]
    # block mapping: a new line after the `path:` entry (a datasets split: after the mapping's
    # last line), at the same indentation
    path_key, path_value = _key(node, "path"), _value(node, "path")
    if path_key is None or path_value is None:
        path_key, path_value = node.value[0][0], node.value[-1][1]
        while isinstance(path_value, yaml.MappingNode | yaml.SequenceNode) and path_value.value:
            last = path_value.value[-1]
            path_value = last[1] if isinstance(path_value, yaml.MappingNode) else last
    line_end = text.find("\n", path_value.end_mark.index)
    indent = " " * path_key.start_mark.column
    if line_end < 0:
        return f"{text}\n{indent}sha256: {digest}\n"
    return f"{text[:line_end]}\n{indent}sha256: {digest}{text[line_end:]}"


def pin(
    spec_path: str | Path, *, check_only: bool = False, missing_only: bool = False
) -> PinResult:
    """Pin every hash the spec is missing or has wrong; write the spec once (atomically).
    `missing_only` (what `rlenv record` does): add missing hashes, never replace one (a stale
    input hash means the inputs changed: that stays an error)."""
    from rlenv.spec_compose import chain

    spec = Path(spec_path)
    if not spec.is_file():
        raise SpecError("spec file not found", where=str(spec))
    waiting: list[str] = []
    files = chain(spec)  # a variant's own paths are pinned in it, its base's in the base
    planned = [(path, *plan(path, waiting, variant=path != files[-1])) for path in files]
    pins: list[Pin] = []
    written = False
    for path, text, found in planned:
        if missing_only:
            found = [(item, node) for item, node in found if item.old is None]
        for item, _ in found:
            item.file = "" if path == spec else path.name
        pins += [item for item, _ in found]
        # edit from the end of the file backwards so earlier offsets stay valid
        edited = text
        for item, node in sorted(found, key=lambda pair: -pair[1].start_mark.index):
            if item.changed:
                edited = _edit(edited, node, item.new)
        if edited != text and not check_only:
            yaml.safe_load(edited)  # the edit keeps the document readable (else a bug)
            atomic_write(path, edited)
            written = True
    return PinResult(spec, pins, written, waiting)
