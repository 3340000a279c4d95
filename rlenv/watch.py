"""Evaluating checkpoints as a training run writes them: `rlenv watch OUTPUT_DIR --env SPEC`
(any trainer that saves Hugging Face ``checkpoint-N`` directories: TRL, verl, OpenRLHF) and the
TRL callback (`rlenv.trl.RlenvCallback`) share this.

Each checkpoint becomes an ordinary run directory (``step-N``) of the held-out env, scored with
the ``hf:`` provider against the initial model as the KL reference, so `rlenv compare` and
`rlenv report` work on them; its summary's headline numbers are returned as ``rlenv/...``
scalars for the trainer's loggers (and, for `watch`, a TensorBoard event file).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlenv.errors import UserError

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json")


@dataclass
class Evaluation:
    step: int
    checkpoint: Path
    run_dir: Path
    summary: dict[str, Any]
    seconds: float
    reused: bool = False
    verdict: dict[str, Any] | None = None
    """This checkpoint's verdict against the reference (step-0, else the first evaluated)."""
    series: dict[str, Any] | None = None
    """The training run's verdict so far (any hacked checkpoint makes it hacked)."""

    @property
    def scalars(self) -> dict[str, float]:
        return {**summary_scalars(self.summary), **verdict_scalars(self.verdict, self.series)}


def verdict_scalars(
    verdict: dict[str, Any] | None, series: dict[str, Any] | None = None
) -> dict[str, float]:
    """``rlenv/verdict`` (0 healthy, 1 inconclusive, 2 regressed, 3 reward_hacking) of the
    checkpoint, ``rlenv/verdict_run`` of the run so far, and each cross-checkpoint signal's
    effect as ``rlenv/signals/<name>`` (reward_auc as "undefined" is left out, with why in
    the run directory's summary)."""
    from rlenv.metrics.verdict import CODES

    if verdict is None:
        return {}
    out = {"rlenv/verdict": float(CODES[verdict["status"]])}
    if series is not None:
        out["rlenv/verdict_run"] = float(CODES[series["status"]])
    for name, signal in (verdict.get("signals") or {}).items():
        effect = signal.get("effect")
        if isinstance(effect, int | float):
            out[f"rlenv/signals/{name}"] = float(effect)
    return out


class Verdicts:
    """Cross-checkpoint verdicts as checkpoints arrive, as `rlenv compare` gives them at the
    end: each checkpoint against the reference run -- the starting model's ``step-0`` when it
    was evaluated, else the first checkpoint -- with the Bonferroni factor of the checkpoints
    judged so far."""

    def __init__(self) -> None:
        self.reference: tuple[str, list[Any]] | None = None
        self.checkpoints: list[dict[str, Any]] = []

    def add(self, evaluation: Evaluation) -> None:
        from rlenv.audit import read_audited_run
        from rlenv.metrics.verdict import judge, overall

        records = read_audited_run(evaluation.run_dir).records
        label = evaluation.run_dir.name
        if self.reference is None:
            self.reference = (label, records)
            evaluation.verdict = {
                "status": "healthy",
                "is_reference": True,
                "evidence": [],
                "notes": ["the reference run: every later checkpoint is judged against it"],
            }
        else:
            judged = sum(1 for c in self.checkpoints if not c["verdict"].get("is_reference"))
            evaluation.verdict = judge(
                self.reference[1], records, tests=judged + 1, reference_label=self.reference[0]
            )
        self.checkpoints.append({"label": label, "verdict": evaluation.verdict})
        evaluation.series = overall(self.checkpoints)


def summary_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The headline numbers of a run as ``rlenv/<name>`` scalars (None values left out, but an
    undefined ``reward_auc`` -- no rollout passes, or every one -- is logged as NaN beside
    ``rlenv/reward_auc_undefined`` 1, so the chart shows the gap and why)."""
    values: dict[str, Any] = {
        "rlenv/pass_rate": (summary.get("pass_rate") or {}).get("value"),
        "rlenv/reward_mean": (summary.get("reward") or {}).get("mean"),
        "rlenv/flags": len(summary.get("flags") or []),
        "rlenv/kl_sequence": (summary.get("kl") or {}).get("mean_sequence_kl"),
        "rlenv/reward_auc": ((summary.get("diagnostics") or {}).get("reward_auc") or {}).get(
            "value"
        ),
    }
    auc = (summary.get("diagnostics") or {}).get("reward_auc") or {}
    if auc and auc.get("value") is None:  # nothing (or everything) passes: kept on the chart
        values["rlenv/reward_auc"] = float("nan")
        values["rlenv/reward_auc_undefined"] = 1.0
    for k, value in (summary.get("pass_at_k") or {}).items():
        values[f"rlenv/pass_at_{k}"] = value
    for name, component in (summary.get("reward_components") or {}).items():
        values[f"rlenv/rewards/{name}"] = component.get("mean")
    for status, count in (summary.get("counts") or {}).items():
        values[f"rlenv/status/{status}"] = count
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}


def evaluate_checkpoint(
    spec: str | Path,
    checkpoint: str | Path,
    *,
    step: int,
    out_root: str | Path,
    reference: str | Path | None = None,
    limit: int | None = None,
    rollouts: int | None = None,
    concurrency: int = 4,
) -> Evaluation:
    """Run the held-out env on one checkpoint into ``out_root/step-N`` (a finished run there
    is reused, so a restarted watcher or trainer does not score a checkpoint twice)."""
    from rlenv.audit import read_audited_run
    from rlenv.runner import RunSettings, run

    run_dir = Path(out_root) / f"step-{step}"
    finished = run_dir / "summary.json"
    if finished.is_file():  # reused only as every reader reads a run: verified
        summary = read_audited_run(run_dir).summary
        return Evaluation(step, Path(checkpoint), run_dir, summary, 0.0, reused=True)
    started = time.monotonic()
    result = run(
        spec,
        RunSettings(
            model=f"hf:{Path(checkpoint).resolve()}",
            reference=f"hf:{Path(reference).resolve()}" if reference else None,
            out=run_dir,
            limit=limit,
            rollouts=rollouts,
            concurrency=concurrency,
        ),
    )
    return Evaluation(step, Path(checkpoint), run_dir, result.summary, time.monotonic() - started)


def complete_checkpoints(output_dir: Path) -> Iterator[tuple[int, Path]]:
    """``(N, dir)`` of every ``checkpoint-N`` that holds a config and weights, by N."""
    found = []
    for entry in output_dir.iterdir() if output_dir.is_dir() else []:
        match = CHECKPOINT.match(entry.name)
        if not match or not entry.is_dir() or not (entry / "config.json").is_file():
            continue
        if any(any(entry.glob(pattern)) for pattern in WEIGHTS):
            found.append((int(match.group(1)), entry))
    yield from sorted(found)


def watch(
    output_dir: str | Path,
    spec: str | Path,
    *,
    out: str | Path | None = None,
    reference: str | Path | None = None,
    limit: int | None = None,
    rollouts: int | None = None,
    once: bool = False,
    interval: float = 30.0,
    settle: float = 5.0,
    tensorboard: bool = True,
    on_result: Callable[[Evaluation], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> list[Evaluation]:
    """Evaluate every complete checkpoint in `output_dir`, oldest first; with `once`, stop
    when none is left, else keep polling every `interval` seconds (until interrupted). A
    checkpoint is scored only after its files have not changed for `settle` seconds.

    The starting model (`reference`, else the local directory the first checkpoint's
    config.json names as ``_name_or_path``, as the TRL callback finds it) is evaluated first
    as ``step-0``: the base -> first checkpoint comparison is the most telling one. Each
    evaluation carries its verdict against it (:class:`Verdicts`); without a starting model,
    ``on_note`` hears it in one line and the first checkpoint is the reference."""
    from rlenv.env import load_environment

    directory = Path(output_dir)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such training output directory")
    load_environment(spec, purpose="run")  # a broken env is one line now, not per checkpoint
    out_root = Path(out) if out else directory / "rlenv"
    done: set[int] = set()
    results: list[Evaluation] = []
    verdicts = Verdicts()
    started = False
    while True:
        pending = [(n, path) for n, path in complete_checkpoints(directory) if n not in done]
        if pending and not started:
            started = True
            if reference is None:
                reference = find_reference(pending[0][1])
                if reference is None and on_note is not None:
                    on_note(
                        f"no --reference and {pending[0][1] / 'config.json'} names no local"
                        " starting model: KL will be missing and the first checkpoint is the"
                        " reference of the verdicts"
                    )
            if reference is not None and 0 not in done:
                pending.insert(0, (0, Path(reference)))  # the starting model, as step-0
        for step, checkpoint in pending:
            if step and time.time() - _newest_change(checkpoint) < settle:
                continue  # still being written
            evaluation = evaluate_checkpoint(
                spec,
                checkpoint,
                step=step,
                out_root=out_root,
                reference=reference,
                limit=limit,
                rollouts=rollouts,
            )
            verdicts.add(evaluation)
            done.add(step)
            results.append(evaluation)
            if tensorboard and not evaluation.reused:
                _tensorboard(out_root / "tensorboard", evaluation)
            if on_result:
                on_result(evaluation)
        unsettled = [n for n, _ in complete_checkpoints(directory) if n not in done]
        if once and not unsettled:
            return results
        time.sleep(min(interval, settle) if unsettled else interval)


def find_reference(checkpoint: Path) -> str | None:
    """The local starting model a checkpoint was trained from: its config.json's
    ``_name_or_path`` when that is a directory holding a config (None otherwise: a hub name,
    or the checkpoint itself)."""
    import json

    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = config.get("_name_or_path") if isinstance(config, dict) else None
    if not isinstance(name, str) or not name:
        return None
    path = Path(name)
    if not (path / "config.json").is_file() or path.resolve() == checkpoint.resolve():
        return None
    return str(path)


def _newest_change(path: Path) -> float:
    return max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=0.0)


def _tensorboard(directory: Path, evaluation: Evaluation) -> None:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        return
    writer = SummaryWriter(logdir=str(directory), flush_secs=3600)
    try:
        for tag, value in evaluation.scalars.items():
            writer.add_scalar(tag, value, global_step=evaluation.step)
    finally:
        writer.close()
