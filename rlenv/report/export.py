"""Export compared runs' scalar metrics to experiment trackers: TensorBoard event files
(tensorboardX, a small pure-Python writer) and, when ``wandb`` is installed, a W&B offline run.

Step of each run = its ``step`` in the compare result (the position in the list, or the
number given with ``--steps``), so the curves line up with the training steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlenv.errors import UserError

COMPARE_PREFIX = "compare"


def run_scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """Every scalar metric of one compared run: its compute_all scalars (``pass_rate/value``,
    ``reward/mean``, ``pass_k/pass_at_k/1``, ...) and its compare row (``compare/...``)."""
    from rlenv.report.common import flatten_scalars

    scalars = dict(row.get("scalars") or {})
    skip = {"scalars", "flags", "warnings", "step", "name", "run_dir", "fingerprint", "digest"}
    table = {key: value for key, value in row.items() if key not in skip}
    scalars.update(flatten_scalars(table, COMPARE_PREFIX))
    return dict(sorted(scalars.items()))


def _add_histograms(writer: Any, histograms: Mapping[str, Any], row: Mapping[str, Any]) -> set[str]:
    """The run's reward and length histograms (shared bins) at its step; the tags written."""
    written = set()
    for field, block in sorted(histograms.items()):
        run = (block or {}).get("runs", {}).get(row["name"])
        if not run or not run["num"]:
            continue
        tag = f"histograms/{field}"
        writer.add_histogram_raw(
            tag,
            min=run["min"],
            max=run["max"],
            num=run["num"],
            sum=run["sum"],
            sum_squares=run["sum_squares"],
            bucket_limits=block["edges"][1:],
            bucket_counts=run["counts"],
            global_step=int(row["step"]),
        )
        written.add(tag)
    return written


def export_tensorboard(result: Mapping[str, Any], logdir: str | Path) -> dict[str, Any]:
    """Write one TensorBoard event file in ``logdir`` with every scalar of every run at the
    run's step; return ``{"dir", "files", "tags", "steps"}``."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise UserError(
            "--tensorboard needs the 'tensorboardX' package: pip install 'rlenv[report]'"
        ) from None
    directory = Path(logdir)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--tensorboard {directory} exists and is not a directory")
    before = set(directory.glob("events.out.tfevents.*")) if directory.is_dir() else set()
    writer = SummaryWriter(logdir=str(directory), flush_secs=3600)
    tags: set[str] = set()
    histogram_tags: set[str] = set()
    try:
        for row in result["runs"]:
            for tag, value in run_scalars(row).items():
                writer.add_scalar(tag, value, global_step=int(row["step"]))
                tags.add(tag)
            writer.add_text("run", f"{row['name']}: {row['run_dir']}", global_step=int(row["step"]))
            histogram_tags.update(_add_histograms(writer, result.get("histograms") or {}, row))
    finally:
        writer.close()
    files = sorted(str(p) for p in set(directory.glob("events.out.tfevents.*")) - before)
    return {
        "dir": str(directory),
        "files": files,
        "tags": len(tags),
        "histograms": sorted(histogram_tags),
        "steps": [int(row["step"]) for row in result["runs"]],
    }


def export_wandb(
    result: Mapping[str, Any], directory: str | Path, project: str = "rlenv"
) -> dict[str, Any]:
    """A W&B offline run (``directory/wandb/offline-run-*``; ``wandb sync`` uploads it later)
    with the same scalars as TensorBoard; skipped, with the reason, when ``wandb`` is not
    installed. W&B needs increasing steps: give the runs in training-step order."""
    try:
        import wandb
    except ImportError:
        return {"written": False, "reason": "wandb is not installed; W&B export skipped"}
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    first = result["runs"][0]
    run = wandb.init(
        mode="offline",
        dir=str(target),
        project=project,
        name=f"compare-{first.get('env') or 'runs'}",
        config={
            "env": first.get("env"),
            "fingerprint": first.get("fingerprint"),
            "runs": [{"name": row["name"], "run_dir": row["run_dir"]} for row in result["runs"]],
        },
        settings=wandb.Settings(silent=True, console="off"),
    )
    try:
        for row in result["runs"]:
            run.log(run_scalars(row), step=int(row["step"]))
    finally:
        run.finish()
    return {"written": True, "dir": str(Path(run.dir).parent)}
