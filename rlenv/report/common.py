"""Shared pieces of the report and compare pages: reading a run directory, formatting numbers
and flags, drawing plots, rendering templates and writing files atomically.

matplotlib and jinja2 are imported inside the functions that use them, so importing this
module (and ``rlenv --help``) stays fast.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rlenv.canonical import indented_json
from rlenv.errors import UserError
from rlenv.files import atomic_write
from rlenv.results import RolloutRecord

TEMPLATES = Path(__file__).parent / "templates"
REPORT_EXTRA = "pip install 'rlenv[report]'"


@dataclass
class RunData:
    """One run directory as written by the runner: run.json, summary.json, results.jsonl."""

    run_dir: Path
    meta: dict[str, Any]
    summary: dict[str, Any]
    records: list[RolloutRecord]
    warnings: list[str] = field(default_factory=list)

    def _env(self) -> dict[str, Any]:
        return dict(self.summary.get("env") or self.meta.get("env") or {})

    @property
    def env_name(self) -> str | None:
        return self._env().get("name")

    @property
    def env_version(self) -> Any:
        return self._env().get("version")

    @property
    def fingerprint(self) -> str | None:
        value = self._env().get("fingerprint")
        return str(value) if value else None

    @property
    def model(self) -> dict[str, Any]:
        return dict(self.summary.get("model") or self.meta.get("model") or {})

    @property
    def decoding(self) -> dict[str, Any]:
        return dict(self.summary.get("decoding") or self.meta.get("decoding") or {})

    @property
    def calibration(self) -> dict[str, Any] | None:
        """The reward model's human-scale calibration the run was made with (run.json)."""
        value = self.meta.get("reward_calibration")
        return dict(value) if isinstance(value, Mapping) else None

    @property
    def digest(self) -> str:
        from rlenv.results import run_digest

        return run_digest(self.records)


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory as every reader does (rlenv.audit.read_audited_run: records,
    summary.json and run.json agree); UserError (one line) when it is not a run directory or
    not intact."""
    from rlenv.audit import read_audited_run

    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (expected a run directory)")
    if not (path / "results.jsonl").is_file():
        raise UserError(f"{path}: no results.jsonl, not a run directory")
    try:
        run = read_audited_run(path)
    except OSError as exc:
        raise UserError(f"{path}: unreadable: {exc}") from None
    return RunData(path, run.meta, run.summary, run.records)


_STEP_NAME = re.compile(r"^(?:step|checkpoint)-(\d+)$")


def training_step(run: RunData) -> int | None:
    """The training step a run scored, read from the run and the trainer, never from the
    order the shell listed the directories in: the ``global_step`` of the scored checkpoint's
    ``trainer_state.json`` (``hf:`` models), else a ``checkpoint-N`` model directory, else a
    ``step-N`` run directory (as the TRL callback and ``rlenv watch`` name them)."""
    uri = str(run.model.get("uri") or "")
    if uri.startswith("hf:"):
        model_dir = Path(uri[3:])
        state = model_dir / "trainer_state.json"
        try:
            step = json.loads(state.read_text(encoding="utf-8")).get("global_step")
            if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
                return step
        except (OSError, ValueError, AttributeError):
            pass
        found = _STEP_NAME.match(model_dir.name)
        if found and model_dir.name.startswith("checkpoint-"):
            return int(found.group(1))
    found = _STEP_NAME.match(run.run_dir.name)
    return int(found.group(1)) if found else None


def load_baseline(run_dir: str | Path, like: RunData) -> RunData:
    """The ``--baseline`` reference run: a run directory of the same env as ``like`` (same
    fingerprint, so the same reward model and verifiers), else a UserError naming both."""
    try:
        baseline = load_run(run_dir)
    except UserError as exc:
        raise UserError(f"--baseline: {exc}") from None
    if baseline.fingerprint and like.fingerprint and baseline.fingerprint != like.fingerprint:
        raise UserError(
            f"--baseline {baseline.run_dir}: env fingerprint {baseline.fingerprint[:12]} differs"
            f" from the run's {like.fingerprint[:12]} (a baseline must be the same env)"
        )
    return baseline


def load_labels(human: Any) -> Any:
    """Human labels from a path (rlenv.jsonl.load_human), or passed through when loaded."""
    from rlenv.jsonl import load_human
    from rlenv.results import HumanLabels

    if human is None or isinstance(human, (HumanLabels, Mapping)):
        return human
    path = Path(human)
    if not path.is_file():
        raise UserError(f"--human {path}: no such file")
    return load_human(path)


# ----------------------------------------------------------------------------- formatting


def fmt(value: Any, digits: int = 3) -> str:
    """A number as a person reads it: 3 significant digits, ints as they are, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 10**digits:
            return f"{value:,.0f}"
        if abs(value) < 1e-3:
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    if isinstance(value, Mapping):
        return ", ".join(
            f"{key} {fmt(item, digits)}" for key, item in value.items() if item is not None
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(item, digits) for item in value) + "]"
    return str(value)


def format_flag(flag: Mapping[str, Any]) -> str:
    """One flag as one line: name, runs (for compare flags), message, the number that raised
    it and the threshold it crossed."""
    runs = flag.get("runs")
    where = f" ({' -> '.join(str(run) for run in runs)})" if runs else ""
    return (
        f"{flag.get('name')}{where}: {flag.get('message')}"
        f" [value {fmt(flag.get('value'))}; threshold {fmt(flag.get('threshold'))}]"
    )


def format_flags(flags: Iterable[Mapping[str, Any]]) -> list[str]:
    """Terminal lines for flags (metrics.flags / compare flags), one per flag, each with the
    number that raised it, e.g. ``length_bias: reward correlates with response length
    (Spearman 0.93) [value 0.93; threshold 0.5]``."""
    return [format_flag(flag) for flag in flags]


def format_errors(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Terminal lines for a run's errors block: per failing part, how often and the first
    error with the env's frames under it, e.g. ``reward model: 40 of 40 rollouts; first
    (input a, rollout 0): KeyError: 'b'`` then ``  at my_env/rm.py:3 in score: ...``."""
    lines = []
    for row in rows:
        first = row.get("first") or {}
        lines.append(
            f"{row.get('component')}: {row.get('failed')} of {row.get('of')} {row.get('unit')};"
            f" first (input {first.get('input_id')}, rollout {first.get('rollout')}):"
            f" {first.get('error')}"
        )
        lines += [f"  at {frame}" for frame in first.get("traceback") or []]
    return lines


def flatten_scalars(value: Any, prefix: str = "") -> dict[str, float]:
    """Every scalar number in a nested dict as ``{"a/b/c": float}`` (bools as 0/1); lists and
    None are left out. Tag parts are made safe for TensorBoard/W&B (pass@k -> pass_at_k)."""
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        for key in value:
            part = _tag(str(key))
            out.update(flatten_scalars(value[key], f"{prefix}/{part}" if prefix else part))
    elif isinstance(value, (int, float)) and math.isfinite(float(value)):  # bools too, as 0/1
        out[prefix] = float(value)
    return out


def _tag(part: str) -> str:
    part = part.replace("@", "_at_").replace("^", "_hat_")
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", part)


# ----------------------------------------------------------------------------- plots


def require(module: str, feature: str) -> Any:
    """Import an optional dependency, or raise UserError naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"{feature} needs the '{module}' package: {REPORT_EXTRA}") from None


_SVG_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_SVG_SIZE = re.compile(r'\s(width|height)="[0-9.]+pt"')
_SVG_XMLNS = re.compile(r'\sxmlns(:xlink)?="[^"]*"')

COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "main": "#0969da", "alt": "#8250df"}


def new_figure(width: float = 5.6, height: float = 3.0) -> tuple[Any, Any]:
    """A matplotlib figure and axes on the Agg backend (no display, no pyplot state)."""
    require("matplotlib", "the report")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.grid(True, color="#d0d7de", linewidth=0.6)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return figure, axes


def figure_svg(figure: Any, salt: str) -> str:
    """The figure as an inline <svg> element: text kept as text, no XML prologue, no date,
    ids salted per plot so several plots on one page never share an id."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        figure.savefig(
            buffer,
            format="svg",
            metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
        )
    svg = _SVG_PROLOGUE.sub("", buffer.getvalue(), count=1)
    head, body = svg.split(">", 1)
    # the HTML parser needs no namespace declarations, and the size comes from CSS
    head = _SVG_XMLNS.sub("", _SVG_SIZE.sub("", head))
    body = body.replace(' id="', f' id="{salt}-').replace('href="#', f'href="#{salt}-')
    body = body.replace("url(#", f"url(#{salt}-")
    return head.replace("<svg", f'<svg class="plot" data-plot="{salt}" role="img"', 1) + ">" + body


def line_plot(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    *,
    xlabel: str,
    ylabel: str,
    salt: str,
    xticklabels: Sequence[str] | None = None,
    ylim: tuple[float, float] | None = None,
    width: float = 5.6,
    height: float = 3.0,
) -> str:
    """Lines with markers (None values leave a gap) as inline SVG."""
    figure, axes = new_figure(width, height)
    palette = [COLORS["main"], COLORS["alt"], COLORS["pass"], COLORS["fail"]]
    for index, (label, values) in enumerate(series.items()):
        ys = [float("nan") if v is None else float(v) for v in values]
        axes.plot(xs, ys, marker="o", label=label, color=palette[index % len(palette)])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if xticklabels is not None:
        axes.set_xticks(list(xs), list(xticklabels), rotation=20, ha="right")
    elif all(float(x).is_integer() for x in xs):
        axes.set_xticks(list(xs))
    if ylim is not None:
        axes.set_ylim(*ylim)
    if len(series) > 1:
        axes.legend(frameon=False, loc="best")
    return figure_svg(figure, salt)


def render(template: str, **context: Any) -> str:
    """Render a page template (autoescaped; inline SVG is passed in as markupsafe.Markup)."""
    jinja2 = require("jinja2", "the report")
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["fmt"] = fmt
    environment.filters["pct"] = lambda v: "-" if v is None else f"{100 * float(v):.1f}%"
    environment.filters["short"] = lambda v, n=16: "-" if not v else str(v)[:n]
    return environment.get_template(template).render(**context)


def markup(html: str) -> Any:
    """Trusted HTML (our own SVG) that the autoescaping templates insert as it is."""
    from markupsafe import Markup

    return Markup(html)


def write_files(directory: Path, files: Mapping[str, str]) -> None:
    """Write text files into ``directory`` (created if need be), each atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        atomic_write(directory / name, text)


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


FIRST = ("verdict", "checkpoints")
"""Keys a reader looks for first: at the top of every JSON object the CLI and reports print,
the rest in sorted order."""


def json_text(value: Any) -> str:
    """Indented JSON, keys sorted at every level except that ``verdict`` (then
    ``checkpoints``) comes first in the top object: the answer before the numbers."""
    fast = _json_text_through_orjson(value)
    if fast is not None:
        return fast
    ordered = _sorted(value)
    if isinstance(ordered, dict):
        ordered = {**{k: ordered[k] for k in FIRST if k in ordered}, **ordered}
    return indented_json(ordered)


def _json_text_through_orjson(value: Any) -> str | None:
    """`json_text`'s text, a fifth of its CPU (`rlenv run --json` of 10k inputs: 0.16 s of the
    orchestrator), or None where the same text is not proven: ``json.dumps`` (its C encoder,
    no indent) finds no NaN, infinity or value it cannot write, so orjson, which writes a NaN as
    ``null``, has none to write; orjson then sorts the keys (by code point, as `_sorted`) and
    refuses what `_sorted` or ``json.dumps`` would write otherwise (a key that is not exactly
    a ``str``, an integer beyond 64 bits, a lone surrogate); `indented_json` with `finite`
    writes the sorted value as ``json.dumps(indent=2)`` does (tests/test_json_text.py)."""
    try:
        json.dumps(value, allow_nan=False)
        ordered = orjson.loads(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except (TypeError, ValueError, RecursionError):
        return None
    if isinstance(ordered, dict):
        ordered = {**{k: ordered[k] for k in FIRST if k in ordered}, **ordered}
    return indented_json(ordered, finite=True)


def dump_json(value: Any) -> str:
    return json_text(value) + "\n"
