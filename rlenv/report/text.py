"""Plain-text terminal summary of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlenv.report.common import format_errors, format_flags


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_summary(summary: dict[str, Any], run_dir: Path | None = None) -> str:
    from rlenv.metrics.verdict import headline

    env = summary["env"]
    lines = [headline(summary["verdict"])] if summary.get("verdict") else []
    lines += [
        f"env      {env['name']} v{env['version']}  fingerprint {env['fingerprint'][:16]}",
        f"model    {summary['model'].get('uri')}",
        f"rollouts {summary['rollouts']}"
        f" ({summary['inputs']} inputs x {summary['rollouts_per_input']})"
        + "  "
        + "  ".join(f"{status} {count}" for status, count in summary["counts"].items()),
    ]
    rate = summary["pass_rate"]
    ci = rate.get("wilson_ci") or [None, None]
    lines.append(
        f"pass     {_fmt(rate.get('value'))}"
        f"  (95% CI {_fmt(ci[0])}-{_fmt(ci[1])}, n={rate.get('n')})"
    )
    if summary["pass_at_k"]:
        lines.append(
            "pass@k   " + "  ".join(f"{k}: {_fmt(v)}" for k, v in summary["pass_at_k"].items())
        )
        lines.append(
            "pass^k   " + "  ".join(f"{k}: {_fmt(v)}" for k, v in summary["pass_hat_k"].items())
        )
    reward = summary.get("reward")
    if reward:
        lines.append(
            f"reward   mean {_fmt(reward.get('mean'))}  std {_fmt(reward.get('std'))}"
            f"  min {_fmt(reward.get('min'))}  max {_fmt(reward.get('max'))}"
        )
    for name, component in (summary.get("reward_components") or {}).items():
        ci = component.get("bootstrap_ci") or [None, None]
        lines.append(
            f"  {name:<10} mean {_fmt(component.get('mean'))}"
            f" ({_fmt(ci[0])}-{_fmt(ci[1])}, n={component.get('n')})"
        )
    kl = summary.get("kl")
    if kl:
        lines.append(
            f"KL       {kl.get('estimator')}: sequence {_fmt(kl.get('mean_sequence_kl'))} nats,"
            f" per token {_fmt(kl.get('mean_token_kl'))}  k1 {_fmt(kl.get('mean_k1'))}"
            f"  k3 {_fmt(kl.get('mean_k3'))}  entropy {_fmt(kl.get('mean_entropy'))}"
        )
    groups = summary.get("groups")
    if groups:
        for value, group in groups.items():
            if value == "field":
                continue
            rate = group["pass_rate"]
            ci = rate.get("wilson_ci") or [None, None]
            lines.append(
                f"  {groups['field']}={value}: pass {_fmt(rate.get('value'))}"
                f" ({_fmt(ci[0])}-{_fmt(ci[1])}, n={rate.get('n')})"
                f"  reward {_fmt(group.get('reward_mean'))}"
            )
    for hazard in summary.get("hazards") or []:
        lines.append(f"WARN     {hazard.get('name')}: {hazard.get('message')}")
    if summary.get("fixtures"):
        lines.append("fixtures " + "  ".join(f"{k} {v}" for k, v in summary["fixtures"].items()))
    for index, line in enumerate(format_errors(summary.get("errors") or [])):
        lines.append(("errors   " if index == 0 else "         ") + line)
    flags = summary.get("flags") or []
    for flag, line in zip(flags, format_flags(flags), strict=True):
        lines.append(f"{'NOTE' if flag.get('kind') == 'note' else 'FLAG'}     {line}")
    lines.append(f"digest   {summary['digest']}")
    if run_dir is not None:
        lines.append(f"run dir  {run_dir}")
    return "\n".join(lines)
