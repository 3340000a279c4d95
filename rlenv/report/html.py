"""`rlenv report RUN_DIR`: one self-contained HTML page of a run's diagnostics.

The page has no network assets: CSS is inline and plots are inline SVG drawn with matplotlib
(Agg), so it can be mailed, archived with the run, or opened on an air-gapped machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.report.browser import state_rows
from rlenv.report.common import (
    COLORS,
    RunData,
    dump_json,
    figure_svg,
    format_flag,
    line_plot,
    load_baseline,
    load_labels,
    load_run,
    markup,
    new_figure,
    render,
    require,
    write_files,
)
from rlenv.results import Status

MAX_TRAJECTORIES = 100
"""Suspects shown with their full trajectory; the rest are listed in metrics.json."""


def write_report(
    run_dir: str | Path,
    human: str | Path | Any | None = None,
    *,
    out: str | Path | None = None,
    baseline: str | Path | None = None,
    group_by: str | None = None,
) -> Path:
    """Write ``report.html`` and ``metrics.json`` (compute_all output) into the run directory
    (or ``out``); return the report's path. ``human`` is a labels file for jsonl.load_human
    (or loaded labels). UserError when the directory holds no results.jsonl."""
    return Path(report_run(run_dir, human, out=out, baseline=baseline, group_by=group_by)["report"])


def report_run(
    run_dir: str | Path,
    human: str | Path | Any | None = None,
    *,
    out: str | Path | None = None,
    baseline: str | Path | None = None,
    group_by: str | None = None,
) -> dict[str, Any]:
    """:func:`write_report`, returning what a command prints: ``report`` and ``metrics``
    paths, the ``flags`` shown on the page, the reward-hacking ``suspects`` and the
    ``collapsed_inputs``. ``baseline``: a reference run directory of the same env (e.g. the
    SFT checkpoint) whose passing answers are a second reference for suspects.

    ``group_by`` names an input field (default: the run's own ``--group-by``): pass rate and
    reward per value of it (:func:`rlenv.metrics.group_stats`) are shown, and kept in
    metrics.json as ``groups``. Input fields come from the inputs file of the run's spec."""
    from rlenv import metrics

    run = load_run(run_dir)
    reference = load_baseline(baseline, run) if baseline is not None else None
    labels = load_labels(human)
    require("matplotlib", "rlenv report")
    require("jinja2", "rlenv report")
    diagnostics = metrics.compute_all(
        run.records,
        labels,
        decoding=run.decoding,
        baseline=reference.records if reference is not None else None,
    )
    if reference is not None:
        diagnostics["verdict"]["reference"] = reference.run_dir.name
    if run.calibration is not None:
        diagnostics["calibrated_reward"] = metrics.calibrated_reward(
            run.records, run.calibration, labels
        )
    from rlenv.report.browser import input_fields

    fields, fields_note = input_fields(run.meta)
    field = group_by or run.meta.get("group_by")
    if field and fields:
        if group_by and not any(field in row for row in fields.values()):
            raise UserError(f"--group-by {field}: no input of this run has that field")
        labels_of = {input_id: row.get(field) for input_id, row in fields.items()}
        diagnostics["groups"] = {"field": field, **metrics.group_stats(run.records, labels_of)}
    elif field and (run.summary.get("groups") or {}).get("field") == field:
        diagnostics["groups"] = run.summary["groups"]  # the run's own, when the inputs moved
    elif group_by:
        raise UserError(f"--group-by {field}: the inputs' fields cannot be read ({fields_note})")
    target = Path(out) if out is not None else run.run_dir
    shown_file = str(human) if isinstance(human, (str, Path)) else None
    page = render_report(
        run,
        diagnostics,
        human_file=shown_file,
        baseline_dir=str(reference.run_dir) if reference is not None else None,
        fields=fields,
        fields_note=fields_note,
    )
    write_files(target, {"metrics.json": dump_json(diagnostics), "report.html": page})
    return {
        "verdict": diagnostics["verdict"],
        "report": str(target / "report.html"),
        "metrics": str(target / "metrics.json"),
        "flags": diagnostics.get("flags") or [],
        "errors": diagnostics.get("errors") or [],
        "suspects": (diagnostics.get("disagreements") or {}).get("high_reward_failed") or [],
        "collapsed_inputs": (diagnostics.get("diversity") or {}).get("collapsed_inputs") or [],
        "groups": diagnostics.get("groups"),
        "warnings": run.warnings,
    }


def render_report(
    run: RunData,
    diagnostics: Mapping[str, Any],
    human_file: str | None = None,
    baseline_dir: str | None = None,
    fields: Mapping[str, Mapping[str, Any]] | None = None,
    fields_note: str | None = None,
) -> str:
    """The report page for a run and its compute_all dict, as an HTML string. ``fields``:
    each input's fields, for the sample browser's filters (:func:`browser.input_fields`)."""
    from rlenv.metrics import is_greedy
    from rlenv.report.browser import SampleTable, json_blob

    by_key = {(str(r.get("input_id")), int(r.get("rollout", 0))): r for r in run.records}
    flags = diagnostics.get("flags") or []
    disagreements = diagnostics.get("disagreements") or {}
    suspects = _with_trajectories(disagreements.get("high_reward_failed") or [], by_key)
    alignment = diagnostics.get("alignment")
    human_suspects = (
        _with_trajectories(alignment.get("high_reward_low_human") or [], by_key)
        if alignment
        else []
    )
    table = SampleTable(fields)
    table.add_run(
        run.run_dir.name or "run",
        run.records,
        suspects=[(s["input_id"], s["rollout"]) for s in suspects],
        collapsed=(diagnostics.get("diversity") or {}).get("collapsed_inputs") or [],
    )
    samples = table.data()
    plots = {
        "pass_k": _pass_k_plot(diagnostics.get("pass_k") or {}),
        "reward_histogram": _histogram_plot(diagnostics.get("reward") or {}),
        "length_reward": _scatter_plot(run.records, diagnostics.get("length_bias") or {}),
        "sample_efficiency": _efficiency_plot(diagnostics.get("sample_efficiency") or []),
    }
    return render(
        "report.html.j2",
        title=f"rlenv report: {run.env_name or run.run_dir.name}",
        run=run,
        run_dir=str(run.run_dir),
        model=run.model,
        decoding=run.decoding,
        digest=run.digest,
        rollouts_per_input=run.summary.get("rollouts_per_input")
        or run.meta.get("rollouts_per_input"),
        m=diagnostics,
        flags=[{**flag, "line": format_flag(flag)} for flag in flags],
        greedy=is_greedy(run.decoding),
        suspects=suspects,
        human_suspects=human_suspects,
        max_trajectories=MAX_TRAJECTORIES,
        human_file=human_file,
        baseline_dir=baseline_dir,
        collapsed=_collapsed_rows(diagnostics.get("diversity") or {}, by_key),
        plots={name: markup(svg) if svg else None for name, svg in plots.items()},
        warnings=run.warnings,
        samples=samples,
        samples_json=json_blob(samples),
        fields_note=fields_note,
        groups=diagnostics.get("groups"),
    )


def _with_trajectories(
    rows: Sequence[Mapping[str, Any]], by_key: Mapping[tuple[str, int], Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Suspect rows joined with their record: failing verifiers, answer, messages."""
    out = []
    for index, row in enumerate(rows):
        record = by_key.get((str(row["input_id"]), int(row["rollout"]))) or {}
        failing = [
            {**v, "diff_rows": state_rows(v.get("state"))}
            for v in record.get("verifiers") or []
            if v.get("passed") is not True
        ]
        out.append(
            {
                **row,
                "anchor": f"suspect-{row['input_id']}-{row['rollout']}",
                "failing": failing,
                "answer": record.get("answer"),
                "status": record.get("status"),
                "messages": (record.get("messages") or []) if index < MAX_TRAJECTORIES else None,
            }
        )
    return out


def _collapsed_rows(
    div: Mapping[str, Any], by_key: Mapping[tuple[str, int], Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each collapsed input's per-input diversity row and its first rollout's answer."""
    rows = []
    for row in div.get("per_input") or []:
        if row.get("collapsed"):
            record = by_key.get((str(row["input_id"]), 0)) or {}
            rows.append({**row, "answer": record.get("answer")})
    return rows


# ----------------------------------------------------------------------------- plots


def _pass_k_plot(pass_k: Mapping[str, Mapping[str, float]]) -> str | None:
    at_k = pass_k.get("pass@k") or {}
    hat_k = pass_k.get("pass^k") or {}
    if not at_k:
        return None
    ks = sorted(int(k) for k in at_k)
    return line_plot(
        ks,
        {"pass@k": [at_k[str(k)] for k in ks], "pass^k": [hat_k.get(str(k)) for k in ks]},
        xlabel="k (rollouts)",
        ylabel="probability",
        salt="pass-k",
        ylim=(-0.02, 1.02),
    )


def _histogram_plot(reward: Mapping[str, Any]) -> str | None:
    histogram = reward.get("histogram")
    if not histogram:
        return None
    counts, edges = histogram["counts"], histogram["edges"]
    figure, axes = new_figure()
    widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    if not any(widths):  # every reward equal: numpy gives bins of width 0
        widths = [1.0 / len(counts)] * len(counts)
    axes.bar(
        edges[:-1],
        counts,
        width=widths,
        align="edge",
        color=COLORS["main"],
        edgecolor="white",
        linewidth=0.8,
    )
    axes.set_xlabel("reward")
    axes.set_ylabel("rollouts")
    return figure_svg(figure, "reward-histogram")


def _length(record: Mapping[str, Any], unit: str) -> float:
    """Length as metrics.length_bias measures it (its ``unit``)."""
    if unit == "completion_tokens":
        return float((record.get("usage") or {}).get("completion_tokens") or 0)
    answer = record.get("answer")
    return float(len(answer.split())) if answer else 0.0


def _scatter_plot(records: Sequence[Mapping[str, Any]], bias: Mapping[str, Any]) -> str | None:
    from rlenv.metrics import proxy_reward

    unit = str(bias.get("unit") or "words")
    points = []
    for record in records:
        reward = proxy_reward(record)
        if record.get("status") == Status.INFRA_ERROR or reward is None:
            continue
        points.append((_length(record, unit), float(reward), record.get("passed") is True))
    if not points:
        return None
    figure, axes = new_figure()
    for passed, label, color in (
        (True, "passed", COLORS["pass"]),
        (False, "failed", COLORS["fail"]),
    ):
        chosen = [(x, y) for x, y, p in points if p is passed]
        if chosen:
            axes.scatter(
                [x for x, _ in chosen],
                [y for _, y in chosen],
                s=18,
                alpha=0.75,
                color=color,
                label=f"{label} ({len(chosen)})",
                linewidths=0,
            )
    axes.set_xlabel("response length (" + unit.replace("_", " ") + ")")
    axes.set_ylabel("reward")
    axes.legend(frameon=False)
    return figure_svg(figure, "length-reward")


def _efficiency_plot(rows: Sequence[Mapping[str, Any]]) -> str | None:
    if not rows:
        return None
    ks = [int(row["k"]) for row in rows]
    series = {"inputs solved by any of the first k": [row.get("pass_any") for row in rows]}
    if any(row.get("best_reward") is not None for row in rows):
        series["mean best reward of the first k"] = [row.get("best_reward") for row in rows]
    return line_plot(ks, series, xlabel="k (rollouts)", ylabel="value", salt="sample-efficiency")
