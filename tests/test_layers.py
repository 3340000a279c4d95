"""Every module of rlenv sits in a layer of the import-linter contract (pyproject.toml): a module
in none can import anything unseen (as the runner once imported the API's `rlenv.audit`). And no
file is over 600 lines (DESIGN.md, Layout): one past it holds more than one concept."""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import tomllib
from pathlib import Path

import rlenv

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages(rlenv.__path__, "rlenv.")]
    return sorted(names)


def _layered() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    return {name.strip() for layer in layers for name in layer.replace("|", ":").split(":")}


def imports_rlenv(module: str) -> bool:
    """Whether a module's source imports anything of rlenv (anywhere in it, lazily too)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return True
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.startswith("rlenv") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlenv"):
            return True
    return False


def unlayered(modules: list[str], layered: set[str]) -> list[str]:
    """The modules neither named in a layer nor inside a package named in one. A package whose
    modules sit in different layers may stay out only if its __init__ imports nothing of rlenv
    (then it cannot cross a layer)."""
    parts = [module.split(".") for module in modules]
    packages = {".".join(p[:-1]) for p in parts if len(p) > 2}
    return [
        ".".join(p)
        for p in parts
        if not any(".".join(p[:depth]) in layered for depth in range(2, len(p) + 1))
        and not (".".join(p) in packages and not imports_rlenv(".".join(p)))
    ]


def test_every_module_is_in_a_layer() -> None:
    modules = _modules()
    assert "rlenv.audit" in modules and "rlenv.rm.score" in modules  # the walk sees them all
    assert unlayered(modules, _layered()) == []


def test_a_module_in_no_layer_is_found() -> None:
    layered = _layered() - {"rlenv.audit"}
    assert unlayered(_modules(), layered) == ["rlenv.audit"]
    # a package spread over layers whose __init__ imports rlenv code would be in none
    assert unlayered(["rlenv.metrics", "rlenv.metrics.run"], {"rlenv.metrics.run"}) == [
        "rlenv.metrics"
    ]
    assert unlayered(["rlenv.rm", "rlenv.rm.score"], {"rlenv.rm.score"}) == []


MAX_LINES = 600
"""DESIGN.md's limit on one file of rlenv."""


def too_long(root: Path, limit: int = MAX_LINES) -> list[str]:
    """The python files under `root` with more than `limit` lines, each as "path: N lines"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root.parent)}: {lines} lines")
    return found


def test_no_file_is_over_600_lines() -> None:
    found = too_long(ROOT / "rlenv")
    assert not found, f"over {MAX_LINES} lines (DESIGN.md: split them): " + ", ".join(found)


def test_a_file_over_600_lines_is_found(tmp_path: Path) -> None:
    package = tmp_path / "rlenv"
    (package / "worker").mkdir(parents=True)
    (package / "worker" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "limit.py").write_text("x = 1\n" * MAX_LINES)
    assert too_long(package) == [f"rlenv/worker/long.py: {MAX_LINES + 1} lines"]


def circles() -> set[frozenset[str]]:
    """The sets of rlenv modules that import each other round a circle (lazy imports too)."""
    import grimp

    graph = grimp.build_graph("rlenv", include_external_packages=False)
    found: set[frozenset[str]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                found.add(frozenset(chain))
    return found


def test_no_import_circles() -> None:
    found = circles()
    assert not {c for c in found if "rlenv.sandbox.run" in c or "rlenv.world.replay" in c}
    assert not found, sorted(sorted(c) for c in found)
