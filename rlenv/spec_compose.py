"""Envs that compose: ``extends: base.yaml`` with overrides, and ``--set key=value``.

A variant names its base in the same directory and writes only what differs: mappings are
merged key by key (deeply), every other value (lists included) replaces the base's. Relative
paths in the composed spec resolve from the spec's directory, which is the base's too, so a
variant shares the base's files and their pinned hashes; `rlenv pin` writes each hash into the
file of the chain that names the path (`chain`), so pinning one variant leaves its siblings valid
when what they share did not change.

``--set key=value`` (dotted keys into mappings, YAML-typed values) is a variant written for the
command line: `with_sets` writes it beside the spec as ``.NAME.set-HASH.yaml`` (content-addressed,
so the same overrides are the same file, and a run's ``run.json`` can name it on `--resume`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlenv.canonical import sha256_json
from rlenv.errors import SpecError, UserError
from rlenv.files import atomic_write
from rlenv.user_yaml import line_at, read_user_text, read_yaml

EXTENDS = "extends"
MAX_CHAIN = 16  # bases deep; a longer chain is a mistake, not a design


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` over ``base``: mappings merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return override


def _base_of(spec_path: Path, node: yaml.Node | None, raw: dict[str, Any]) -> Path:
    """The file ``extends`` names, checked: a string, in the spec's directory, present."""
    value = raw[EXTENDS]
    line = line_at(node, (EXTENDS,))
    where = f"{spec_path}:{line}" if line else str(spec_path)
    if not isinstance(value, str) or not value.strip():
        raise SpecError("extends: expected the base spec's file name (base.yaml)", where=where)
    base = spec_path.parent / value
    if base.resolve().parent != spec_path.resolve().parent:
        raise SpecError(
            f"extends: {value}: the base must be in the spec's directory (paths in both"
            " resolve from there)",
            where=where,
        )
    if not base.is_file():
        raise SpecError(f"extends: base spec not found: {base}", where=where)
    return base


def compose(spec_path: Path, node: yaml.Node | None, raw: dict[str, Any]) -> dict[str, Any]:
    """The spec's fields with its ``extends`` chain applied (the ``extends`` key removed)."""
    seen = [spec_path.resolve()]
    layers = [raw]
    current, current_node, current_raw = spec_path, node, raw
    while EXTENDS in current_raw:
        base = _base_of(current, current_node, current_raw)
        if base.resolve() in seen:
            names = " -> ".join(path.name for path in [*seen, base.resolve()])
            raise SpecError(f"extends: a cycle: {names}", where=str(spec_path))
        if len(seen) > MAX_CHAIN:
            raise SpecError(f"extends: more than {MAX_CHAIN} bases deep", where=str(spec_path))
        seen.append(base.resolve())
        current_node, current_raw = read_yaml(base, read_user_text(base, "base spec"))
        if not isinstance(current_raw, dict):
            raise SpecError("expected a mapping of fields at the top level", where=f"{base}:1")
        current = base
        layers.append(current_raw)
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = deep_merge(merged, {k: v for k, v in layer.items() if k != EXTENDS})
    return merged


def chain(spec_path: str | Path) -> list[Path]:
    """The spec file and its bases, nearest first (what `rlenv pin` writes hashes into)."""
    files = [Path(spec_path)]
    while True:
        current = files[-1]
        node, raw = read_yaml(current, read_user_text(current, "spec file"))
        if not isinstance(raw, dict) or EXTENDS not in raw:
            return files
        base = _base_of(current, node, raw)
        if base.resolve() in [path.resolve() for path in files] or len(files) > MAX_CHAIN:
            raise SpecError("extends: a cycle", where=str(spec_path))
        files.append(base)


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``["decoding.temperature=0.7", "rollouts=4"]`` as the mapping a variant would hold."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(part.strip() for part in parts):
            raise UserError(f"--set {pair}: expected key=value (dotted keys: decoding.seed=1)")
        if any(part.isdigit() for part in parts):
            raise UserError(
                f"--set {pair}: lists are replaced whole, not by index (--set {parts[0]}='[...]')"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UserError(f"--set {pair}: the value is not YAML: {problem}") from None
        target = overrides
        for part in parts[:-1]:
            existing = target.get(part)
            if not isinstance(existing, dict):
                existing = target[part] = {}
            target = existing
        target[parts[-1]] = value
    return overrides


def with_sets(spec_path: str | Path, pairs: list[str] | None) -> Path:
    """The spec to load: ``spec_path`` itself, or with ``--set`` pairs the variant that extends
    it by them, written beside it (same overrides, same file)."""
    spec = Path(spec_path)
    if not pairs:
        return spec
    overrides = parse_sets(pairs)
    if not spec.is_file():
        raise SpecError("spec file not found", where=str(spec))
    document = {EXTENDS: spec.name, **overrides}
    digest = sha256_json({"spec": spec.name, "set": overrides})[:12]
    variant = spec.parent / f".{spec.stem}.set-{digest}.yaml"
    text = "# written by --set; delete freely\n" + yaml.safe_dump(document, sort_keys=True)
    if not variant.is_file() or variant.read_text(encoding="utf-8") != text:
        try:
            atomic_write(variant, text)
        except OSError as exc:
            raise UserError(f"--set: cannot write {variant}: {exc}") from None
    return variant
