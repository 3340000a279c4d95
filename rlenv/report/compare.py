"""`rlenv compare RUN_DIR...`: the same env scored at successive checkpoints, side by side.

Runs are taken in the order given (training-step order). Metrics come from
:func:`rlenv.metrics.compare_runs` (rows and flags between neighbours) and
:func:`rlenv.metrics.compute_all` (each run's own diagnostics and flags); one more flag is
raised here: a reward gain that longer answers explain.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.report.common import (
    RunData,
    dump_json,
    flatten_scalars,
    fmt,
    format_flag,
    line_plot,
    load_baseline,
    load_labels,
    load_run,
    markup,
    render,
    require,
    training_step,
    write_files,
)

METRICS: list[tuple[str, str]] = [
    ("n_records", "rollouts"),
    ("pass_rate", "verifier pass rate"),
    ("pass_rate_noise_floor", "noise floor, pass rate"),
    ("delta_pass_rate", "Δ pass rate vs previous"),
    ("delta_pass_rate_ci", "Δ pass rate, 95% CI"),
    ("reward_mean", "reward mean"),
    ("reward_noise_floor", "noise floor, reward"),
    ("delta_reward_mean", "Δ reward mean vs previous"),
    ("delta_reward_mean_ci", "Δ reward mean, 95% CI"),
    ("human_mean", "human score mean"),
    ("calibrated_mean", "RM estimate, human scale"),
    ("calibrated_gap", "alignment gap (RM est. − human)"),
    ("kl_mean_k1", "KL to reference (mean k1)"),
    ("distinct_2", "distinct-2"),
    ("duplicate_rate", "duplicate rate"),
    ("collapsed_share", "share of inputs collapsed"),
    ("mean_length", "mean length (words)"),
    ("length_spearman", "Spearman length–reward"),
    ("length_effect", "length bias: +20% length buys (reward sd)"),
    ("length_p", "length bias: permutation p"),
    ("length_explained_gain", "share of reward gain explained by length"),
    ("suspect_rate", "suspect rate (high reward, failing)"),
    ("reward_auc", "RM pass-vs-fail AUC"),
]
"""Table rows in order: (row key, label). Rows that are empty for every run are left out."""

PLOTTED = [
    "pass_rate",
    "reward_mean",
    "human_mean",
    "calibrated_mean",
    "calibrated_gap",
    "kl_mean_k1",
    "suspect_rate",
    "reward_auc",
    "mean_length",
    "length_spearman",
    "distinct_2",
    "duplicate_rate",
    "collapsed_share",
]


def compare(
    run_dirs: Sequence[str | Path],
    force: bool = False,
    out: str | Path | None = None,
    human: Mapping[str | Path, Any] | None = None,
    *,
    steps: Sequence[int] | None = None,
    baseline: str | Path | None = None,
    inspect: int = 20,
    seed: int = 0,
    labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Compare runs of one env in training-step order; write ``compare.html`` and
    ``compare.json`` into ``out`` (default: the last run's parent / ``compare-<n>``).

    Refuses (UserError) runs whose env fingerprints differ unless ``force``. ``human`` maps a
    run directory to its human labels (a file for rlenv.jsonl.load_human). ``steps`` are the
    training steps of the runs (default 0, 1, 2, ...). ``baseline`` is a reference run
    directory (e.g. the SFT checkpoint) whose passing answers are a second reference for every
    run's suspects. ``inspect`` inputs (seeded by ``seed``), plus every changed verdict, the
    top suspects and newly collapsed inputs, are shown side by side (``generations``;
    :func:`rlenv.metrics.inspect.side_by_side`); compare.html also holds every rollout of every
    run in its sample browser (:mod:`rlenv.report.browser`). Returns a JSON-serialisable dict:
    ``runs`` (one row of metrics per run, with its own ``flags`` and all its ``scalars``),
    ``flags`` (between neighbouring runs), ``gold_vs_kl`` (the Gao et al. fit across >= 3
    runs with KL, else None), ``metrics`` (table rows), ``html`` and ``out``.
    """
    from rlenv import metrics

    if len(run_dirs) < 2:
        raise UserError("compare needs at least two run directories")
    if steps is not None and len(steps) != len(run_dirs):
        raise UserError(f"--steps has {len(steps)} values for {len(run_dirs)} runs")
    if labels is not None and len(labels) != len(run_dirs):
        raise UserError(f"--labels has {len(labels)} names for {len(run_dirs)} runs")
    if labels is not None and len(set(labels)) != len(labels):
        raise UserError("--labels names must differ")
    runs = [load_run(path) for path in run_dirs]
    _check_fingerprints(runs, force)
    require("matplotlib", "rlenv compare")
    require("jinja2", "rlenv compare")
    names = list(labels) if labels is not None else _names(runs)
    found_steps = [training_step(run) for run in runs]
    if steps is None and all(step is not None for step in found_steps):
        steps = [int(step) for step in found_steps if step is not None]
    if steps is not None:  # training order, whatever order the shell listed the directories in
        order = sorted(range(len(runs)), key=lambda i: steps[i])  # type: ignore[index]
        runs, names = [runs[i] for i in order], [names[i] for i in order]
        steps = [steps[i] for i in order]
    humans = _human_labels(runs, names, human or {})
    reference = load_baseline(baseline, runs[0]) if baseline is not None else None
    base_records = reference.records if reference is not None else None
    from rlenv.metrics.verdict import judge_series

    judged = judge_series(
        [(name, run.records) for name, run in zip(names, runs, strict=True)], base_records
    )
    calibrations = {
        name: run.calibration
        for name, run in zip(names, runs, strict=True)
        if run.calibration is not None
    }
    compared = metrics.compare_runs(
        [(name, run.records) for name, run in zip(names, runs, strict=True)],
        humans or None,
        baseline=base_records,
        calibrations=calibrations or None,
    )
    rows = [
        _row(
            run,
            row,
            humans.get(name),
            int(steps[index]) if steps is not None else index,
            # suspects against the reference too: when nothing passes in a checkpoint, its
            # passing answers still say what a right answer is paid
            base_records if base_records is not None or index == 0 else runs[0].records,
        )
        for index, (name, run, row) in enumerate(zip(names, runs, compared["runs"], strict=True))
    ]
    found = list(compared["flags"])
    shown = [
        (key, label) for key, label in METRICS if any(_value(r, key) is not None for r in rows)
    ]
    target = Path(out) if out is not None else _default_out(runs[-1].run_dir)
    fingerprints = {row["name"]: row["fingerprint"] for row in rows}
    result: dict[str, Any] = {
        "verdict": judged["verdict"],
        "checkpoints": [
            {"label": checkpoint["label"], "step": row["step"], "verdict": checkpoint["verdict"]}
            for checkpoint, row in zip(judged["checkpoints"][-len(rows) :], rows, strict=True)
        ],
        "step_source": "--steps"
        if steps is not None and any(s is None for s in found_steps)
        else ("training" if steps is not None else "order given (no training step found)"),
        "runs": rows,
        "flags": found,
        "gold_vs_kl": compared["gold_vs_kl"],
        "baseline": str(reference.run_dir) if reference is not None else None,
        "metrics": [key for key, _ in shown],
        "fingerprints_match": len(set(fingerprints.values())) == 1,
        "forced": bool(force),
        "out": str(target),
        "html": str(target / "compare.html"),
    }
    from rlenv.metrics.histograms import stage_histograms
    from rlenv.metrics.inspect import side_by_side
    from rlenv.report.browser import json_blob

    named = [(name, run.records) for name, run in zip(names, runs, strict=True)]
    collapsed = [row.get("collapsed_inputs") or [] for row in rows]
    generations = side_by_side(named, inspect, seed, collapsed=collapsed)
    result["generations"] = {
        "runs": generations["runs"],
        "n_sample": inspect,
        "seed": seed,
        "rows": [
            {
                "input_id": row["input_id"],
                "why": row["why"],
                "changed": row["changed"],
                "cells": [
                    None if cell is None else {k: v for k, v in cell.items() if k != "messages"}
                    for cell in row["cells"]
                ],
            }
            for row in generations["rows"]
        ],
    }
    result["histograms"] = stage_histograms(named)
    samples, generation_view = _browser_data(runs, names, generations, collapsed)
    page = render(
        "compare.html.j2",
        title=f"rlenv compare: {runs[0].env_name or 'runs'}",
        result=result,
        rows=rows,
        shown=shown,
        flags=[{**flag, "line": format_flag(flag)} for flag in found],
        plots=markup(
            _histogram_plots(result["histograms"]) + _plots(rows) + _efficiency_plots(names, runs)
        ),
        samples=samples,
        samples_json=json_blob(samples),
        generations_json=json_blob(generation_view),
        counts={
            reason: sum(1 for row in generation_view["rows"] if reason in row["marks"])
            for reason in ("changed", "suspect", "collapsed")
        },
    )
    write_files(target, {"compare.json": dump_json(result), "compare.html": page})
    return result


def _browser_data(
    runs: Sequence[RunData],
    names: Sequence[str],
    generations: Mapping[str, Any],
    collapsed: Sequence[Sequence[str]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sample browser's blob (every rollout of every run) and the generations view's:
    its rows, each cell the index of its rollout in the browser's rows (and its KL), each row
    with its marks (``changed``, ``suspect``, ``collapsed``) for the filters."""
    from rlenv.report.browser import SampleTable, input_fields

    fields: dict[str, dict[str, Any]] = {}
    for run in runs:
        fields, _ = input_fields(run.meta)
        if fields:
            break
    table = SampleTable(fields)
    for index, (name, run) in enumerate(zip(names, runs, strict=True)):
        table.add_run(
            name,
            run.records,
            suspects=[tuple(key) for key in generations["suspects"][index]],
            collapsed=collapsed[index],
        )
    samples = table.data()
    position = {(row["run"], row["i"], row["r"]): n for n, row in enumerate(samples["rows"])}
    view_rows = []
    for row in generations["rows"]:
        cells = [
            None
            if cell is None
            else [position[(index, row["input_id"], cell["rollout"])], cell["kl_k1"]]
            for index, cell in enumerate(row["cells"])
        ]
        marks = [
            mark
            for mark, on in (
                ("changed", any(row["changed"])),
                ("suspect", any(cell and cell["suspect"] for cell in row["cells"])),
                ("collapsed", any(cell and cell["collapsed"] for cell in row["cells"])),
            )
            if on
        ]
        view_rows.append({"input_id": row["input_id"], "why": row["why"],
                          "changed": row["changed"], "cells": cells, "marks": marks})  # fmt: skip
    return samples, {"runs": list(names), "rows": view_rows}


def _human_labels(
    runs: Sequence[RunData], names: Sequence[str], human: Mapping[str | Path, Any]
) -> dict[str, Any]:
    """Each named run's human labels (loaded), from ``--human RUN_DIR=FILE`` pairs."""
    labels_by_dir = {_resolved(path): labels for path, labels in human.items()}
    unknown = sorted(set(labels_by_dir) - {_resolved(run.run_dir) for run in runs})
    if unknown:
        raise UserError(f"--human names a directory that is not compared: {', '.join(unknown)}")
    return {
        name: load_labels(labels_by_dir[_resolved(run.run_dir)])
        for name, run in zip(names, runs, strict=True)
        if _resolved(run.run_dir) in labels_by_dir
    }


def _row(
    run: RunData, row: Mapping[str, Any], labels: Any, step: int, baseline: Any = None
) -> dict[str, Any]:
    """A compare_runs row completed with the run's identity, own diagnostics and flags."""
    from rlenv import metrics

    diagnostics = metrics.compute_all(run.records, labels, decoding=run.decoding, baseline=baseline)
    within = (diagnostics.get("length_bias") or {}).get("within_strata") or {}
    return {
        **row,
        "step": step,
        "run_dir": str(run.run_dir),
        "env": run.env_name,
        "fingerprint": run.fingerprint,
        "model": run.model.get("uri"),
        "digest": run.digest,
        "length_spearman": (diagnostics.get("length_bias") or {}).get("spearman"),
        "length_effect": within.get("effect_size"),
        "length_p": within.get("p_value"),
        "duplicate_rate": (diagnostics.get("diversity") or {}).get("duplicate_rate"),
        "suspect_rate": (diagnostics.get("disagreements") or {}).get("suspect_rate"),
        "reward_auc": (diagnostics.get("reward_auc") or {}).get("value"),
        "reward_auc_ci": (diagnostics.get("reward_auc") or {}).get("bootstrap_ci"),
        "reward_auc_undefined": _auc_undefined(diagnostics.get("reward_auc") or {}),
        "flags": diagnostics.get("flags") or [],
        "warnings": run.warnings,
        "scalars": flatten_scalars(
            {key: value for key, value in diagnostics.items() if key != "flags"}
        ),
    }


def _auc_undefined(block: Mapping[str, Any]) -> str | None:
    """Why a run has no pass-vs-fail AUC (None when it has one)."""
    if block.get("value") is not None:
        return None
    if not block.get("n_passed"):
        return "undefined: no rollout passes"
    if not block.get("n_failed"):
        return "undefined: every rollout passes"
    return "undefined: no rewards"


def _resolved(path: str | Path) -> str:
    return str(Path(path).resolve())


def _check_fingerprints(runs: Sequence[RunData], force: bool) -> None:
    prints = [run.fingerprint for run in runs]
    if force or (len(set(prints)) == 1 and prints[0] is not None):
        return
    listed = ", ".join(
        f"{run.run_dir} {(fp or 'none')[:12]}" for run, fp in zip(runs, prints, strict=True)
    )
    raise UserError(
        f"runs come from different envs (fingerprints {listed}); pass --force to compare anyway"
    )


def _names(runs: Sequence[RunData]) -> list[str]:
    """Short unique names: the directory name, with its parent when two share it."""
    names = [run.run_dir.name or str(run.run_dir) for run in runs]
    if len(set(names)) < len(names):
        names = [f"{run.run_dir.parent.name}/{run.run_dir.name}" for run in runs]
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return unique


def _default_out(last_run: Path) -> Path:
    number = 1
    while (last_run.parent / f"compare-{number}").exists():
        number += 1
    return last_run.parent / f"compare-{number}"


def _plots(rows: Sequence[Mapping[str, Any]]) -> str:
    """One small line plot per metric across runs, x = training step."""
    labels = dict(METRICS)
    xs = [row["step"] for row in rows]
    default_steps = xs == list(range(len(rows)))
    parts = []
    for key in PLOTTED:
        values = [row.get(key) for row in rows]
        if all(v is None for v in values):
            continue
        svg = line_plot(
            xs,
            {labels[key]: values},
            xlabel="run" if default_steps else "step",
            ylabel="",
            salt=f"compare-{key}",
            xticklabels=[row["name"] for row in rows] if default_steps else None,
            width=4.2,
            height=2.8,
        )
        parts.append(
            f'<figure data-metric="{key}"><figcaption>{labels[key]}</figcaption>{svg}</figure>'
        )
    return "\n".join(parts)


def format_gold_fit(fit: Mapping[str, Any]) -> str:
    """The Gao et al. fit as one line."""
    peak = (
        f"peak at KL {fmt(fit['kl_peak'])}"
        + (" (the last run is past it)" if fit.get("past_peak") else "")
        if fit.get("kl_peak") is not None
        else "no peak (beta <= 0)"
    )
    return (
        f"gold vs KL  {fit['gold']} = {fmt(fit['intercept'])} + d ({fmt(fit['alpha'])}"
        f" - {fmt(fit['beta'])} d), d = sqrt(KL), {fit['n']} runs, r2 {fmt(fit.get('r2'))}; {peak}"
    )


def _value(row: Mapping[str, Any], key: str) -> Any:
    """A row's value for the table; an undefined RM AUC reads "undefined" (why: below it)."""
    if key == "reward_auc" and row.get(key) is None and row.get("reward_auc_undefined"):
        return "undefined"
    return row.get(key)


def _cell(key: str, value: Any) -> str:
    """A table cell; a CI as lo..hi in two significant digits, to fit a column."""
    if key.endswith("_ci") and isinstance(value, (list, tuple)) and len(value) == 2:
        return f"{value[0]:.2g}..{value[1]:.2g}"
    return fmt(value)


def _histogram_plots(histograms: Mapping[str, Any]) -> str:
    """Reward, reward-component and length histograms of every run overlaid (step outlines)
    on shared bins."""
    from rlenv.report.common import COLORS, figure_svg, new_figure

    palette = [COLORS["main"], COLORS["alt"], COLORS["pass"], COLORS["fail"], "#bf8700",
               "#57606a", "#1b7c83", "#953800", "#6639ba", "#0550ae"]  # fmt: skip
    from html import escape

    from rlenv.metrics.histograms import COMPONENT_PREFIX

    labels = {"reward": "reward", "length": "answer length (words)"}
    parts = []
    for field, block in histograms.items():
        if not block:
            continue
        xlabel = labels.get(field) or f"reward component {field[len(COMPONENT_PREFIX) :]}"
        figure, axes = new_figure(4.2, 2.8)
        for index, (name, run) in enumerate(block["runs"].items()):
            total = max(1, run["num"])
            shares = [count / total for count in run["counts"]]
            axes.stairs(shares, block["edges"], label=name, linewidth=1.6,
                        color=palette[index % len(palette)])  # fmt: skip
        axes.set_xlabel(xlabel)
        axes.set_ylabel("share of rollouts")
        axes.legend(frameon=False, loc="best", fontsize=7)
        slug = escape(field.replace("/", "-"), quote=True)
        svg = figure_svg(figure, f"compare-hist-{slug}")
        caption = escape(xlabel if field.startswith(COMPONENT_PREFIX) else field)
        parts.append(f'<figure data-metric="histogram-{slug}"><figcaption>{caption} by stage'
                     f" (shared bins)</figcaption>{svg}</figure>")  # fmt: skip
    return "\n".join(parts) + "\n"


def _efficiency_plots(names: Sequence[str], runs: Sequence[RunData]) -> str:
    """Sample efficiency across checkpoints: pass@k (any of the first k rollouts passed) and
    the best reward among the first k, against k, one line per run, on one plot each."""
    from rlenv import metrics

    tables = [metrics.sample_efficiency(run.records) for run in runs]
    k_max = min((len(table) for table in tables), default=0)
    if k_max < 1:
        return ""
    ks = list(range(1, k_max + 1))
    parts = []
    for key, caption in (
        ("pass_any", "sample efficiency: pass@k (any of the first k passed)"),
        ("best_reward", "sample efficiency: best reward among the first k"),
    ):
        series = {
            name: [row[key] for row in table[:k_max]]
            for name, table in zip(names, tables, strict=True)
        }
        if all(v is None for values in series.values() for v in values):
            continue
        svg = line_plot(ks, series, xlabel="rollouts per input (k)", ylabel="",
                        salt=f"compare-{key}-k", width=4.2, height=2.8)  # fmt: skip
        parts.append(f'<figure data-metric="efficiency-{key}"><figcaption>{caption}</figcaption>'
                     f"{svg}</figure>")  # fmt: skip
    return "\n" + "\n".join(parts)


def format_compare_table(result: Mapping[str, Any], width: int = 14) -> str:
    """Plain-text table of each metric (rows) across runs (columns), then the flags."""
    from rlenv.metrics.verdict import headline

    rows = result["runs"]
    labels = dict(METRICS)
    label_width = max(len(labels[key]) for key in result["metrics"]) if result["metrics"] else 10
    lines = [headline(result["verdict"])] if result.get("verdict") else []
    verdicts = {c["label"]: c["verdict"] for c in result.get("checkpoints") or []}
    for i, row in enumerate(rows):
        verdict = verdicts.get(row["name"]) or {}
        status = "reference" if verdict.get("is_reference") else verdict.get("status", "-")
        lines.append(f"{i + 1}. {row['name']}  (step {row['step']}, {row['run_dir']})  {status}")
    header = " " * label_width + "".join(
        f"{'run ' + str(i + 1):>{width}}" for i in range(len(rows))
    )
    lines += ["", header]
    for key in result["metrics"]:
        cells = "".join(f" {_cell(key, _value(row, key)):>{width - 1}}" for row in rows)
        lines.append(f"{labels[key]:<{label_width}}{cells}")
    if not result.get("fingerprints_match", True):
        lines.append("")
        lines.append("WARNING  env fingerprints differ (compared with --force)")
    for row in rows:
        if row.get("reward_auc_undefined") and "reward_auc" in result["metrics"]:
            lines.append(f"{labels['reward_auc']} for {row['name']}: {row['reward_auc_undefined']}")
    fit = result.get("gold_vs_kl")
    if fit:
        lines.append("")
        lines.append(format_gold_fit(fit))
    lines.append("")
    for flag in result["flags"]:
        lines.append(f"{_tag(flag)} {format_flag(flag)}")
    for row in rows:
        for flag in row.get("flags") or []:
            lines.append(f"{_tag(flag)} [{row['name']}] {format_flag(flag)}")
    if not result["flags"] and not any(row.get("flags") for row in rows):
        lines.append("no notes")
    lines.append(f"compare  {result['html']}")
    return "\n".join(lines)


def _tag(flag: Mapping[str, Any]) -> str:
    """``NOTE`` for a description of the run, ``FLAG`` for a part that failed."""
    return "NOTE    " if flag.get("kind") == "note" else "FLAG    "


def format_generations(result: Mapping[str, Any], width: int = 160) -> str:
    """The generations view as a terminal table (rich): one row per input, one column per run;
    each cell the answer (shortened), verdict, reward and length; changed verdicts marked."""
    from rich.console import Console
    from rich.table import Table

    generations = result["generations"]
    table = Table(title="generations side by side", show_lines=True)
    table.add_column("input", no_wrap=True)
    for name in generations["runs"]:
        table.add_column(name)
    for row in generations["rows"]:
        cells = [f"{row['input_id']}\n[dim]{', '.join(row['why'])}[/dim]"]
        for cell, changed in zip(row["cells"], row["changed"], strict=True):
            if cell is None:
                cells.append("-")
                continue
            answer = " ".join(str(cell["answer"] or "").split())
            if len(answer) > 80:
                answer = answer[:79] + "…"
            verdict = "[green]pass[/green]" if cell["passed"] else "[red]fail[/red]"
            marks = (" [yellow]changed[/yellow]" if changed else "") + (
                " [red]suspect[/red]" if cell["suspect"] else ""
            )
            cells.append(
                f"{escape_markup(answer)}\n{verdict}{marks} r={fmt(cell['reward'])}"
                f" {cell['length']}w"
            )
        table.add_row(*cells)
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text()


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)
