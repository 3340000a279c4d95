"""`rlenv rm train|eval`: the held-out reward model (library: rlenv.rm.train, rlenv.rm.evaluate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlenv.commands._common import JsonOpt, handle_errors, print_json


@handle_errors
def train(
    prefs: Annotated[
        Path, typer.Argument(help="Preference pairs JSONL: prompt, chosen, rejected[, margin].")
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for head.npz + manifest.json.")],
    seed: Annotated[int, typer.Option(help="Split and initialisation seed.")] = 0,
    holdout: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="Share of pairs (whole prompts) held out for the manifest."
        ),
    ] = 0.2,
    epochs: Annotated[
        int | None,
        typer.Option(min=1, help="Gradient steps (default 500).", show_default=False),
    ] = None,
    l2: Annotated[
        float | None, typer.Option(min=0, help="L2 penalty (default 3e-4).", show_default=False)
    ] = None,
    length_feature: Annotated[
        bool,
        typer.Option(
            "--length-feature/--no-length-feature",
            help="Add log answer length as a visible feature.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Train a linear Bradley-Terry head on frozen all-MiniLM-L6-v2 embeddings."""
    from rlenv.rm.train import DEFAULT_EPOCHS, DEFAULT_L2
    from rlenv.rm.train import train as train_rm

    result = train_rm(
        prefs,
        out,
        seed=seed,
        holdout=holdout,
        epochs=DEFAULT_EPOCHS if epochs is None else epochs,
        l2=DEFAULT_L2 if l2 is None else l2,
        length_feature=length_feature,
    )
    manifest = result.manifest
    if as_json:
        print_json({"out": str(result.out), "manifest": manifest})
        return
    metrics, split = manifest["metrics"], manifest["split"]
    typer.echo(
        f"trained {result.out}: {split['train']['n']} train / {split['holdout_pairs']['n']}"
        f" holdout pairs, train accuracy {_percent(metrics['train_accuracy'])},"
        f" holdout accuracy {_percent(metrics['holdout_accuracy'])}"
        f" ({result.seconds:.1f}s)"
    )


@handle_errors
def evaluate(
    model: Annotated[
        str, typer.Argument(help="Reward model: DIR (from rm train), rm:DIR, hf-rm:DIR or URL.")
    ],
    prefs: Annotated[Path, typer.Argument(help="Preference pairs JSONL to evaluate on.")],
    as_json: JsonOpt = False,
) -> None:
    """Pairwise accuracy, ECE, length bias and length-controlled counterexamples."""
    from rlenv.rm.evaluate import evaluate as evaluate_rm
    from rlenv.rm.evaluate import format_report

    report = evaluate_rm(model, prefs)
    if as_json:
        print_json(report)
    else:
        typer.echo(format_report(report))


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _parse_scale(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    low, sep, high = text.partition(",")
    try:
        if not sep:
            raise ValueError
        return float(low), float(high)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected LO,HI, e.g. 1,10") from None


@handle_errors
def calibrate(
    model: Annotated[
        str, typer.Argument(help="Reward model: DIR (from rm train), rm:DIR, hf-rm:DIR or URL.")
    ],
    scores: Annotated[
        Path, typer.Argument(help="Human scores JSONL: prompt, answer, score (absolute scale).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Where calibration.json goes (default: the reward model's directory,"
            " where runs pick it up).",
        ),
    ] = None,
    scale: Annotated[
        str | None,
        typer.Option(
            "--scale", metavar="LO,HI", help="The human scale (default: the scores' min and max)."
        ),
    ] = None,
    holdout: Annotated[
        float, typer.Option(min=0, max=0.9, help="Share of prompts held out for the MAE.")
    ] = 0.2,
    seed: Annotated[int, typer.Option(help="Hold-out split and bootstrap seed.")] = 0,
    n_boot: Annotated[
        int, typer.Option("--n-boot", min=0, help="Bootstrap fits for the band.")
    ] = 200,
    as_json: JsonOpt = False,
) -> None:
    """Map the reward model's raw score onto a human scale (isotonic, with a bootstrap band)."""
    from rlenv.rm.calibration import calibrate as calibrate_rm

    result = calibrate_rm(
        model, scores, out, scale=_parse_scale(scale), holdout=holdout, seed=seed, n_boot=n_boot
    )
    if as_json:
        print_json(result)
        return
    held = result["holdout"]
    lo, hi = result["scale"]
    typer.echo(
        f"calibrated {result['n']} scores ({result['prompts']} prompts) on the scale"
        f" {lo:g}-{hi:g}: {len(result['knots']['raw'])} knots,"
        f" {result['band']['n_boot']} bootstrap fits"
    )
    if held["mae"] is not None:
        typer.echo(
            f"held-out MAE {held['mae']:.3g} on {held['n']} scores ({held['prompts']} prompts);"
            f" a constant predictor {held['mae_constant']:.3g}"
        )
    typer.echo(f"wrote {result['path']}")
