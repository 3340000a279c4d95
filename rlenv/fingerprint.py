"""The env fingerprint: a hash of the canonical spec (without the policy fields), of every file
it references (the hashes `rlenv.env`'s file checks collect) and of the env's python modules.

The modules are found without executing them (env code runs only in the frozen world): each
module the spec names by import string, and the helpers it imports under the spec's python
paths, traced through their syntax trees.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rlenv.canonical import canonical_bytes, sha256_bytes, sha256_file
from rlenv.files import sys_path

if TYPE_CHECKING:  # a worker reads the sources of records (`rlenv.spec_data`)
    from rlenv.spec import LoadedSpec


def python_sources(loaded: LoadedSpec) -> dict[str, str]:
    """sha256 of the source of every module the env names by import string (tools, verifiers,
    the reward model) and of the helpers they import under the spec's python paths.

    Found without executing the modules, so a changed tool or verifier changes the fingerprint.
    The default policy (`model:`) is not the env: its source is the model's identity
    (`policy_sources`), recorded in run.json beside the env fingerprint.
    """
    refs: list[str] = [tool.function for tool in loaded.spec.tools if tool.function]
    refs += [verifier.function for verifier in loaded.spec.verifiers if verifier.function]
    if loaded.spec.reward_model and loaded.spec.reward_model.function:
        refs.append(loaded.spec.reward_model.function)
    return _module_sources(loaded, refs)


def policy_sources(loaded: LoadedSpec, model_uri: str) -> dict[str, str]:
    """sha256 of a ``python:`` policy's module and the helpers it imports under the spec's
    python paths (empty for any other scheme, or a policy installed outside the env)."""
    if not model_uri.startswith("python:"):
        return {}
    return _module_sources(loaded, [model_uri[len("python:") :]])


def _module_sources(loaded: LoadedSpec, refs: list[str]) -> dict[str, str]:
    """sha256 of each named module that lives beside the spec, plus its imported helpers."""
    sources: dict[str, str] = {}
    with sys_path(loaded.python_paths()):
        for ref in sorted(set(refs)):
            module = ref.split(":", 1)[0]
            origin = _module_origin(module)
            if origin is None:
                continue
            if origin.is_relative_to(loaded.root.parent) or origin.is_relative_to(loaded.root):
                sources[module] = sha256_file(origin)
                for name, path in _imported_helpers(module, origin, loaded.python_paths()):
                    sources.setdefault(name, sha256_file(path))
    return sources


def _module_origin(module: str) -> Path | None:
    """The file `import module` would load, found the way the import system finds it but
    without importing anything: `importlib.util.find_spec("pkg.mod")` imports ``pkg`` (runs
    its ``__init__``), and env code runs only in the frozen world."""
    from importlib.machinery import PathFinder

    found = None
    locations: list[str] | None = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        imported = sys.modules.get(name)
        try:
            if imported is not None:
                found = getattr(imported, "__spec__", None)
            else:
                found = PathFinder.find_spec(name, locations)
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        if depth < len(parts):
            if found.submodule_search_locations is None:
                return None
            locations = list(found.submodule_search_locations)
    if found is None or not found.origin or not Path(found.origin).is_file():
        return None
    return Path(found.origin)


def _imported_helpers(module: str, origin: Path, roots: list[Path]) -> Iterator[tuple[str, Path]]:
    """Every module under `roots` that `module` imports, transitively (read, never executed).

    Imports are found by walking each file's syntax tree (anywhere in it, so imports inside
    functions count too); a name is kept when it resolves to a .py file under one of the spec's
    python paths, with each enclosing package's __init__.py. Installed packages are not env code.
    """
    seen: set[str] = {module}
    queue: list[tuple[str, Path]] = [(module, origin)]
    while queue:
        name, path = queue.pop()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for candidate in _import_names(tree, package):
            parts = candidate.split(".")
            for depth in range(1, len(parts) + 1):
                dotted = ".".join(parts[:depth])
                if dotted in seen:
                    continue
                found = _module_file(dotted, roots)
                if found is None:
                    continue
                seen.add(dotted)
                queue.append((dotted, found))
                yield dotted, found


def _import_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Absolute names of what a module imports (`from a import b` yields a and a.b)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                up = node.level - 1
                if up > len(anchor):
                    continue
                anchor = anchor[: len(anchor) - up] if up else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if not base:
                continue
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _module_file(dotted: str, roots: list[Path]) -> Path | None:
    """The .py file of a dotted module name under one of `roots` (a package's __init__.py)."""
    relative = Path(*dotted.split("."))
    for root in roots:
        for path in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
            if path.is_file():
                return path
    return None


# Spec fields that name the policy, not the env: recorded in run.json as the model's identity.
POLICY_FIELDS = ("model", "reference")


def package_files(loaded: LoadedSpec, modules: dict[str, str]) -> dict[str, str]:
    """sha256 of every file under the python package directories of the env's `modules`
    (``pkg/path/in/it`` → hash; bytecode caches left out).

    The env's code can reach any of them without an import statement the syntax tree shows:
    `importlib.import_module("pkg.helper")`, a data file opened beside the module at call time.
    The policy's own modules are left out (they are the model's identity, `policy_sources`)
    unless the env's modules import them too.
    """
    roots = loaded.python_paths()
    policy_files = {
        path
        for field in POLICY_FIELDS
        for ref in [getattr(loaded.spec, field, None)]
        if isinstance(ref, str) and ref.startswith("python:")
        for path in [_module_file(ref[len("python:") :].split(":", 1)[0], roots)]
        if path is not None
    }
    env_files = {path for name in modules for path in [_module_file(name, roots)] if path}
    skipped = policy_files - env_files
    found: dict[str, str] = {}
    for top in sorted({name.split(".", 1)[0] for name in modules}):
        for root in roots:
            directory = root / top
            if not (directory / "__init__.py").is_file() and not directory.is_dir():
                continue
            if top in modules and not (directory / "__init__.py").is_file():
                continue  # a module file beside a directory of its name: the file is imported
            for path in sorted(directory.rglob("*")):
                inside = path.relative_to(directory)
                if "__pycache__" in inside.parts or path.suffix in (".pyc", ".pyo"):
                    continue
                if path.is_file() and path not in skipped:
                    found.setdefault(f"{top}/{inside.as_posix()}", sha256_file(path))
            break  # the first python path holding the package is the one imports use
    return found


_MAX_NAME_CHARS = 260  # longer string constants are text, not a file name


def named_files(loaded: LoadedSpec, modules: dict[str, str]) -> dict[str, str]:
    """sha256 of every file under the spec's directory or python paths that the env's
    `modules` name by a string constant (keyed by its path relative to the spec's directory),
    and of what those files name in turn.

    A flat-layout module beside the spec is in no package directory (`package_files`), yet it
    reaches files by name at call time: ``Path(__file__).parent / "gold.txt"``,
    ``importlib.import_module("helper")``. A constant is such a name when, taken relative to
    the module's directory, the spec's directory or a python path, it is a file there (or a
    module importable from a python path). Read from the syntax trees, never executed, so
    validate, run, verify and --resume all compute the same fingerprint.
    """
    roots = loaded.python_paths()
    bounds = [loaded.root.resolve(), *(root.resolve() for root in roots)]
    queue = [path for name in sorted(modules) for path in [_module_file(name, roots)] if path]
    seen: set[Path] = {path.resolve() for path in queue}
    found: dict[str, str] = {}
    while queue:
        path = queue.pop()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        texts = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for text in sorted(texts):
            for named in _named(text, path.parent, loaded.root, roots):
                resolved = named.resolve()
                if resolved in seen or not any(resolved.is_relative_to(b) for b in bounds):
                    continue
                seen.add(resolved)
                if resolved.is_relative_to(loaded.root.resolve()):
                    key = resolved.relative_to(loaded.root.resolve()).as_posix()
                else:
                    key = resolved.as_posix()
                found[key] = sha256_file(resolved)
                if resolved.suffix == ".py":  # a module named by string: what it names counts
                    queue.append(resolved)
                    name = resolved.stem
                    for _, helper in _imported_helpers(name, resolved, roots):
                        if helper.resolve() not in seen:
                            queue.append(helper)
    return found


def _named(text: str, here: Path, spec_root: Path, roots: list[Path]) -> Iterator[Path]:
    """The files a string constant may name (see `named_files`)."""
    if not text or len(text) > _MAX_NAME_CHARS or "\n" in text or "\0" in text:
        return
    if text.replace(".", "").replace("_", "").isalnum():  # a module name, dotted
        module = _module_file(text, roots)
        if module is not None:
            yield module
    if Path(text).is_absolute():
        return
    for base in (here, spec_root, *roots):
        candidate = base / text
        try:
            if candidate.is_file() and candidate.suffix not in (".pyc", ".pyo"):
                yield candidate
        except (OSError, ValueError):
            continue


def fingerprint(loaded: LoadedSpec, file_hashes: dict[str, str]) -> str:
    """sha256 over the canonical spec (without the policy fields) plus the hash of every
    referenced file and env module, of every file in the env's python packages, and of every
    file the env's modules name by a string (`named_files`)."""
    spec = {k: v for k, v in loaded.canonical().items() if k not in POLICY_FIELDS}
    for verifier in spec.get("verifiers") or []:  # a cassette that only grows: the same env
        judge = verifier.get("judge") if isinstance(verifier, dict) else None
        if isinstance(judge, dict) and judge.get("mode") in ("record_missing", "live"):
            judge.pop("cassette", None)
    modules = python_sources(loaded)
    payload: dict[str, object] = {"spec": spec, "files": file_hashes, "modules": modules}
    packages = package_files(loaded, modules)
    if packages:  # an env without packages keeps the fingerprint it had before they counted
        payload["packages"] = packages
    named = named_files(loaded, modules)
    if named:  # likewise for an env whose modules name no file
        payload["named"] = named
    return sha256_bytes(canonical_bytes(payload))


__all__ = [
    "POLICY_FIELDS",
    "fingerprint",
    "named_files",
    "package_files",
    "policy_sources",
    "python_sources",
]
