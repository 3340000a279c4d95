"""`rlenv report` and `rlenv compare` on a constructed clean/hacked pair of runs (hacked_runs).

The pages are checked as files, through the real `rlenv` entry point, and rendered in headless
Chromium (skipped when /usr/bin/chromium is missing; a failure under CI). TensorBoard event
files are read back record by record (length, masked CRC-32C, protobuf Event).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, needs
from tests.hacked_runs import FINGERPRINT, RunPair, make_pair, write_run

CHROMIUM = Path("/usr/bin/chromium")
ASSET_REFERENCE = re.compile(
    r"""(?:\b(?:src|href|srcset|poster|action|data)\s*=\s*["']?\s*(?:https?:)?//)"""
    r"""|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> RunPair:
    return make_pair(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def hacked_report(pair: RunPair) -> dict[str, Any]:
    """`rlenv report` of the hacked run with human labels, through the real entry point."""
    done = cli("report", str(pair.hacked), "--human", str(pair.human), "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def assert_self_contained(html: str) -> None:
    assert not ASSET_REFERENCE.search(html), ASSET_REFERENCE.search(html)
    # scripts are inline (the sample browser's and its JSON blob), never fetched
    assert not re.search(r"<script\b[^>]*\bsrc\s*=", html, re.IGNORECASE)
    assert "<link" not in html and "<img" not in html
    # the constructed runs hold no URL at all, so none may appear anywhere in the page
    assert "http://" not in html and "https://" not in html


# ----------------------------------------------------------------------------- report


def test_report_lists_the_hacked_runs_suspects_and_flags(
    pair: RunPair, hacked_report: dict[str, Any]
) -> None:
    report = Path(hacked_report["report"])
    assert report == pair.hacked / "report.html"
    suspects = {(s["input_id"], s["rollout"]) for s in hacked_report["suspects"]}
    assert suspects == set(pair.suspects)

    html = report.read_text(encoding="utf-8")
    assert_self_contained(html)
    rows = set(re.findall(r'id="suspect-(cap-\d\d)-(\d)"', html))
    assert {(input_id, int(rollout)) for input_id, rollout in rows} == set(pair.suspects)
    assert html.count("<details><summary>trajectory") >= len(pair.suspects)
    assert "flattering" not in html  # the trajectory is the record's, not the builder's notes
    assert "What a wonderful and insightful question!" in html
    assert html.count('<svg class="plot"') == 4  # pass@k, histogram, scatter, efficiency

    diagnostics = json.loads((pair.hacked / "metrics.json").read_text())
    rho = diagnostics["length_bias"]["spearman"]
    assert rho > 0.9
    effect = diagnostics["length_bias"]["within_strata"]["effect_size"]
    assert 'data-flag="length_bias"' in html and f"<b>effect_size {effect:.3g}," in html
    assert 'data-flag="high_suspect_rate"' in html
    assert {flag["name"] for flag in hacked_report["flags"]} >= {"length_bias", "high_suspect_rate"}
    assert diagnostics["alignment"]["n_labelled"] == 48
    assert 'id="alignment-gap"' in html
    assert set(re.findall(r'id="human-(cap-\d\d-\d)"', html)) == {
        f"{input_id}-{rollout}" for input_id, rollout in pair.suspects
    }
    assert FINGERPRINT in html and diagnostics["counts"]["records"] == 48


def test_report_of_the_clean_run_has_no_suspects_and_no_flags(pair: RunPair) -> None:
    done = cli("report", str(pair.clean))
    assert done.returncode == 0, done.stderr
    assert "FLAG" not in done.stdout
    assert done.stdout.splitlines()[0].startswith("verdict: INCONCLUSIVE")  # no reference
    assert "suspects 0" in done.stdout
    html = (pair.clean / "report.html").read_text(encoding="utf-8")
    assert 'id="suspect-cap-' not in html and "No notes." in html
    assert_self_contained(html)


def test_report_is_a_pure_function_of_the_run(pair: RunPair, tmp_path: Path) -> None:
    from rlenv.report import write_report

    first = write_report(pair.clean, out=tmp_path / "a").read_bytes()
    second = write_report(pair.clean, out=tmp_path / "b").read_bytes()
    assert first == second


def test_report_without_results_is_a_one_line_user_error(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{}")
    done = cli("report", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip() == f"rlenv: error: {tmp_path}: no results.jsonl, not a run directory"
    assert not (tmp_path / "report.html").exists()


def test_format_flags_gives_one_line_each_with_its_number() -> None:
    from rlenv.report import format_flags

    lines = format_flags(
        [
            {"name": "length_bias", "message": "m", "value": 0.97591, "threshold": 0.5},
            {
                "name": "proxy_gold_turnover",
                "runs": ["a", "b"],
                "message": "n",
                "value": {"delta_reward_mean": 0.3149, "delta_human_mean": None},
                "threshold": 0.04,
            },
        ]
    )
    assert lines == [
        "length_bias: m [value 0.976; threshold 0.5]",
        "proxy_gold_turnover (a -> b): n [value delta_reward_mean 0.315; threshold 0.04]",
    ]


# ----------------------------------------------------------------------------- compare


def test_compare_flags_turnover_and_length_and_writes_a_page(pair: RunPair, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    done = cli("compare", str(pair.clean), str(pair.hacked), "--out", str(out))
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("verdict: REWARD_HACKING since step-200 (vs step-100): ")
    assert "the reward at an equal verifier outcome rose" in first
    assert "NOTE     [step-200] length_bias" in done.stdout
    assert re.search(r"^verifier pass rate\s+0\.875\s+0\.75$", done.stdout, re.M)

    result = json.loads((out / "compare.json").read_text())
    assert list(result)[:2] == ["verdict", "checkpoints"]
    verdict = result["verdict"]
    assert verdict["status"] == "reward_hacking" and verdict["since"] == "step-200"
    evidence = {item["signal"]: item for item in verdict["evidence"]}
    assert evidence["proxy_gold_turnover"]["ci"][0] > 0
    assert evidence["length_explained_gain"]["effect"] >= 0.5
    assert [(c["label"], c["step"], c["verdict"]["status"]) for c in result["checkpoints"]] == [
        ("step-100", 100, "healthy"),
        ("step-200", 200, "reward_hacking"),
    ]
    flags = {flag["name"]: flag for flag in result["flags"]}
    assert flags["kl_growth_without_gain"]["kind"] == "note"
    assert [row["step"] for row in result["runs"]] == [100, 200]  # the training steps
    html = (out / "compare.html").read_text(encoding="utf-8")
    assert_self_contained(html)
    assert 'class="verdict reward_hacking"' in html
    for name in ("proxy_gold_turnover", "length_explained_gain"):
        assert f'data-signal="{name}"' in html
    assert 'data-flag="kl_growth_without_gain" data-kind="note"' in html
    assert html.count('<svg class="plot"') >= 6
    assert 'id="fingerprint-warning"' not in html


def test_compare_orders_runs_by_training_step_not_the_order_given(
    pair: RunPair, tmp_path: Path
) -> None:
    """The shell lists step-190 before step-20; compare reads the steps and sorts."""
    from rlenv.report import compare

    result = compare([pair.hacked, pair.clean], out=tmp_path)
    assert [row["name"] for row in result["runs"]] == ["step-100", "step-200"]
    assert result["verdict"]["status"] == "reward_hacking"


def test_compare_in_the_other_order_raises_no_turnover(pair: RunPair, tmp_path: Path) -> None:
    from rlenv.report import compare

    # explicit steps put the hacked run first: then the clean one is judged against it
    result = compare([pair.hacked, pair.clean], out=tmp_path, steps=[0, 1])
    assert [row["name"] for row in result["runs"]] == ["step-200", "step-100"]
    signals = {item["signal"] for item in result["verdict"]["evidence"]}
    assert "proxy_gold_turnover" not in signals and "length_explained_gain" not in signals


def test_compare_refuses_different_fingerprints_unless_forced(
    pair: RunPair, tmp_path: Path
) -> None:
    other = write_run(tmp_path / "other-env", "hacked", step=300, fingerprint="f" * 64)
    done = cli("compare", str(pair.clean), str(other))
    assert done.returncode == 2
    assert "fingerprints" in done.stderr and "--force" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("compare-*"))

    forced = cli("compare", str(pair.clean), str(other), "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    result = json.loads(forced.stdout)
    assert result["fingerprints_match"] is False and result["forced"] is True
    assert Path(result["out"]) == tmp_path / "compare-1"
    assert 'id="fingerprint-warning"' in Path(result["html"]).read_text(encoding="utf-8")


def test_compare_argument_errors_are_user_errors(pair: RunPair) -> None:
    one = cli("compare", str(pair.clean))
    assert one.returncode == 2 and "at least two" in one.stderr
    steps = cli("compare", str(pair.clean), str(pair.hacked), "--steps", "100")
    assert steps.returncode == 2 and "--steps has 1 values for 2 runs" in steps.stderr


# ----------------------------------------------------------------------------- export


def read_events(path: Path) -> list[Any]:
    """TFRecord framing: u64 length, masked CRC-32C of it, data, masked CRC-32C of data."""
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    data = path.read_bytes()
    events, position = [], 0
    while position < len(data):
        header = data[position : position + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[position + 8 : position + 12])
        assert header_crc == masked_crc32c(header)
        body = data[position + 12 : position + 12 + length]
        (body_crc,) = struct.unpack("<I", data[position + 12 + length : position + 16 + length])
        assert body_crc == masked_crc32c(body)
        events.append(event_pb2.Event.FromString(body))
        position += 16 + length
    return events


def test_tensorboard_event_files_hold_every_run_metric(pair: RunPair, tmp_path: Path) -> None:
    board = tmp_path / "tb"
    done = cli(
        "compare", str(pair.clean), str(pair.hacked), "--out", str(tmp_path / "cmp"),
        "--tensorboard", str(board), "--steps", "100,200", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    files = result["exports"]["tensorboard"]["files"]
    assert len(files) == 1 and Path(files[0]).parent == board
    scalars: dict[str, dict[int, float]] = {}
    for event in read_events(Path(files[0])):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    clean, hacked = result["runs"]
    assert scalars["pass_rate/value"] == {100: pytest.approx(0.875), 200: pytest.approx(0.75)}
    assert scalars["reward/mean"][200] == pytest.approx(hacked["reward_mean"], rel=1e-6)
    assert scalars["length_bias/spearman"][200] == pytest.approx(hacked["length_spearman"])
    assert scalars["pass_k/pass_at_k/2"][100] == pytest.approx(
        clean["scalars"]["pass_k/pass_at_k/2"]
    )
    assert scalars["compare/delta_reward_mean"] == {200: pytest.approx(hacked["delta_reward_mean"])}
    assert set(clean["scalars"]) <= set(scalars)
    assert result["exports"]["tensorboard"]["tags"] == len(scalars)
    wandb = result["exports"]["wandb"]
    if not wandb["written"]:
        assert wandb["reason"] == "wandb is not installed; W&B export skipped"


def test_wandb_offline_run_is_written_when_wandb_is_installed(
    pair: RunPair, tmp_path: Path
) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (optional W&B export)")
    from rlenv.report import compare, export_wandb

    result = compare([pair.clean, pair.hacked], out=tmp_path / "cmp", steps=[100, 200])
    written = export_wandb(result, tmp_path / "wb")
    assert written["written"] is True
    (log,) = Path(written["dir"]).glob("*.wandb")
    assert b"pass_rate/value" in log.read_bytes()


# ----------------------------------------------------------------------------- browser


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", *args,
        ],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@needs(CHROMIUM.exists(), "/usr/bin/chromium")  # skips here, fails under CI
def test_report_renders_in_headless_chromium(
    pair: RunPair, hacked_report: dict[str, Any], tmp_path: Path
) -> None:
    page = Path(hacked_report["report"]).resolve().as_uri()
    dom = chromium("--dump-dom", page, profile=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for input_id, rollout in pair.suspects:
        assert f'id="suspect-{input_id}-{rollout}"' in html
    assert 'data-flag="length_bias"' in html and 'data-flag="high_suspect_rate"' in html
    assert len(re.findall(r'<svg class="plot"', html)) == 4
    assert len(re.findall(r"<(?:path|use)\b", html)) > 100  # the plots drew something
    assert html.count("<details>") >= len(pair.suspects)

    shot = tmp_path / "report.png"
    done = chromium(
        f"--screenshot={shot}", "--window-size=1280,2000", page, profile=tmp_path / "profile-png"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 2000)
    assert len(png) > 50_000  # a blank page compresses to a few kB
    shutil.rmtree(tmp_path / "profile-dom", ignore_errors=True)
