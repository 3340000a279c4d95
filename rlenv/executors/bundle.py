"""The env's files, packed on the driver and unpacked by each Ray actor on its own node.

A Ray cluster rarely shares a filesystem with the machine `rlenv run` starts on, so the driver
packs everything a frozen world reads — the spec, its inputs, the snapshot, every tool and judge
cassette, the reward model's directory and data, and the env's python paths (tools, verifiers,
policies and the helpers they import) — into one tar, puts it in Ray's object store once, and
every actor unpacks it into its private work root before it builds its world. Nothing has to
exist on a node beyond rlenv itself.

Members keep their place relative to the spec (`../fixtures/x` still resolves from the unpacked
spec), so the spec is never rewritten. A path the spec gives as absolute is not packed: it must
exist on every node. A tar, rather than Ray's `runtime_env` `working_dir` (a zip), keeps file
modes and the snapshot's symlinks as they are, and a python path is packed without what is never
env code: hidden entries (.git, .env, .venv...), `__pycache__`, virtualenvs and run directories.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlenv.spec import LoadedSpec, load_spec

ROOT = "env"  # every member lives under this directory of the tar
COMPLETE = ".unpacked"  # written last: a replacement actor reuses a complete unpacked copy
DATASETS = "datasets"  # a datasets split's rows (the driver's cache copy), beside ROOT


@dataclass(frozen=True)
class Bundle:
    data: bytes  # an uncompressed tar (the object store moves it; compressing costs more)
    spec: str  # the spec's member name, relative to the unpack directory
    sha256: str
    files: int


def _relative(loaded: LoadedSpec, entry: str) -> Path | None:
    """Where a path the spec gives relative to itself lies (lexically, as a node will resolve
    it in the unpacked tree); None for an absolute one, which is not packed."""
    if Path(entry).expanduser().is_absolute():
        return None
    return Path(os.path.normpath(loaded.root / entry))


def referenced(loaded: LoadedSpec) -> tuple[list[Path], list[Path]]:
    """(files and directories packed exactly as they are, python-path directories packed
    without hidden entries, caches, virtualenvs and run directories)."""
    spec = loaded.spec
    exact: list[str] = [
        source.path
        for source in (spec.inputs, spec.train_inputs)
        if source is not None and source.path is not None  # a datasets split: dataset_rows()
    ]
    if spec.snapshot is not None:
        exact.append(spec.snapshot.path)
    exact += [tool.cassette.path for tool in spec.tools if tool.cassette]
    exact += [
        v.judge.cassette.path
        for v in spec.verifiers
        if v.judge is not None
        and v.judge.cassette is not None
        and (v.judge.mode == "replay" or loaded.resolve(v.judge.cassette.path).exists())
    ]
    reward = spec.reward_model
    if reward is not None:
        if reward.uri is not None and not reward.uri.startswith(("http://", "https://")):
            exact.append(reward.uri.split(":", 1)[1])  # rm:DIR, hf-rm:DIR
        for name in ("train_data", "training_prompts", "training_pairs"):
            ref = getattr(reward, name)
            if ref is not None:
                exact.append(ref.path)
    paths = [p for p in (_relative(loaded, entry) for entry in exact) if p is not None]
    code = [p for p in (_relative(loaded, e) for e in spec.python_path) if p is not None]
    return [loaded.path, *paths], code


def _skipped(directory: Path, name: str) -> bool:
    """A python-path entry that is never env code (and may hold secrets or gigabytes)."""
    if name.startswith(".") or name == "__pycache__" or name.endswith((".pyc", ".pyo")):
        return True
    path = directory / name
    if path.is_dir():
        if (path / "pyvenv.cfg").exists():  # a virtualenv
            return True
        if (path / "run.json").exists() and (path / "results.jsonl").exists():  # a run dir
            return True
    return False


def _code_files(root: Path) -> Iterator[Path]:
    """The files of a python-path directory, sorted, links to files followed."""
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = sorted(d for d in dirs if not _skipped(here, d) and not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            if not _skipped(here, name) and path.is_file():
                yield path


def build(spec_path: str | Path) -> Bundle:
    """Pack every file the spec's world reads (see the module docstring)."""
    loaded = load_spec(spec_path)
    exact, code = referenced(loaded)
    present_exact = [path for path in exact if path.exists()]
    present_code = [path for path in code if path.is_dir()]
    base = Path(os.path.commonpath([loaded.root, *present_exact, *present_code]))
    buffer = io.BytesIO()
    names: set[str] = set()

    def member(path: Path) -> str:
        relative = path.relative_to(base).as_posix()
        return ROOT if relative == "." else f"{ROOT}/{relative}"

    def covered(name: str) -> bool:
        return any(name == done or name.startswith(done + "/") for done in names)

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in present_exact:  # first, so a snapshot inside a python path keeps its links
            name = member(path)
            if covered(name):
                continue
            tar.add(path, arcname=name, recursive=True)  # links kept as links, modes kept
            names.add(name)
        for root in present_code:
            if not covered(member(root)):
                tar.add(root, arcname=member(root), recursive=False)  # on sys.path even if empty
            for path in _code_files(root):
                name = member(path)
                if covered(name):
                    continue
                info = tar.gettarinfo(str(path.resolve()), arcname=name)
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
                names.add(name)
        for rows in dataset_rows(loaded):
            tar.add(rows, arcname=f"{DATASETS}/{rows.name}")
        count = sum(1 for info in tar.getmembers() if not info.isdir())
    data = buffer.getvalue()
    return Bundle(data, member(loaded.path), hashlib.sha256(data).hexdigest(), count)


def dataset_rows(loaded: LoadedSpec) -> list[Path]:
    """The cached rows of the spec's datasets splits (written when the driver loaded the env;
    a node reads them from its own cache, where unpack() puts them)."""
    sources = (loaded.spec.inputs, loaded.spec.train_inputs)
    return [
        loaded.source_path(source)
        for source in sources
        if source is not None and source.dataset is not None
    ]


def unpack(data: bytes, spec: str, into: Path) -> Path:
    """Unpack a bundle under `into` (once: a complete earlier unpack is reused) and return
    the unpacked spec's path; a datasets split's rows go into this node's rlenv cache."""
    if not (into / COMPLETE).is_file():
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            # the driver's own files, packed by build(): modes and in-snapshot links as they are
            tar.extractall(into, filter="fully_trusted")
        rows = into / DATASETS
        if rows.is_dir():
            from rlenv.files import atomic_write, default_cache_dir

            cache = default_cache_dir() / "datasets"
            cache.mkdir(parents=True, exist_ok=True)
            for path in sorted(rows.iterdir()):
                if not (cache / path.name).is_file():
                    atomic_write(cache / path.name, path.read_bytes())
        (into / COMPLETE).write_text("")
    return into / spec
