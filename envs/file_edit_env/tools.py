"""File tools of the file-edit env. They act on the rollout's private snapshot copy (the cwd)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _inside(ctx: Any, relative: str) -> Path:
    root = Path(ctx.workdir).resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"path {relative!r} is outside the workspace")
    return target


def list_files(args: dict[str, Any], ctx: Any) -> list[str]:
    """Every file of the workspace, sorted (listing order never leaks)."""
    root = Path(ctx.workdir)
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())


def read_file(args: dict[str, Any], ctx: Any) -> str:
    target = _inside(ctx, args["path"])
    if not target.is_file():
        raise FileNotFoundError(f"no such file: {args['path']}")
    return target.read_text(encoding="utf-8")


def write_file(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    target = _inside(ctx, args["path"])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(args["content"], encoding="utf-8")
    return {"written": args["path"], "bytes": len(args["content"].encode())}
