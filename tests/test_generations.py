"""Generations side by side (issue 16 item 1): which inputs `rlenv compare` shows, the text
table for `--inspect N`, and the HTML view rendered in headless Chromium from its JSON blob,
with its filters applied through their links."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rlenv.metrics.inspect import side_by_side
from tests.conftest import cli, needs
from tests.hacked_runs import HACK_ROLLOUT, RunPair, build_records, input_id, make_pair
from tests.test_report import CHROMIUM, assert_self_contained

CHANGED = {input_id(i) for i, rollout in enumerate(HACK_ROLLOUT) if rollout == 0} | {
    input_id(3),  # clean run answered rollout 0 of these wrongly, the hacked run right
    input_id(11),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> RunPair:
    return make_pair(tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module")
def compared(pair: RunPair, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cmp")
    done = cli("compare", str(pair.clean), str(pair.hacked), "--out", str(out), "--json",
               "--inspect", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_every_changed_verdict_is_shown_with_the_seeded_sample() -> None:
    runs = [("clean", build_records("clean", "m1")), ("hacked", build_records("hacked", "m2"))]
    view = side_by_side(runs, n=0)
    changed = {row["input_id"] for row in view["rows"] if "changed" in row["why"]}
    assert changed == CHANGED
    for row in view["rows"]:
        first, second = row["cells"]
        assert row["changed"] == [False, first["passed"] != second["passed"]]
        assert first["rollout"] == second["rollout"] == 0
    suspects = {row["input_id"] for row in view["rows"] if "suspect" in row["why"]}
    assert 0 < len(suspects) <= 5
    sampled = [
        r["input_id"] for r in side_by_side(runs, n=4, seed=1)["rows"] if "sample" in r["why"]
    ]
    assert len(sampled) == 4
    assert sampled == [
        r["input_id"] for r in side_by_side(runs, n=4, seed=1)["rows"] if "sample" in r["why"]
    ]
    assert sampled != [
        r["input_id"] for r in side_by_side(runs, n=4, seed=2)["rows"] if "sample" in r["why"]
    ]


def test_compare_json_and_page_hold_the_view(compared: dict[str, Any]) -> None:
    rows = compared["generations"]["rows"]
    assert {row["input_id"] for row in rows} >= CHANGED
    json.dumps(compared, allow_nan=False)
    assert all("messages" not in cell for row in rows for cell in row["cells"])
    html = Path(compared["html"]).read_text()
    assert_self_contained(html)
    blob = html.split('id="generations-data">', 1)[1].split("</script>", 1)[0]
    assert [row["input_id"] for row in json.loads(blob)["rows"]] == [r["input_id"] for r in rows]
    for name in ("changed", "suspect", "collapsed"):
        assert f'data-filter="{name}"' in html
    # sample efficiency across checkpoints (item 5): pass@k and best reward vs k, a line per run
    for key in ("pass_any", "best_reward"):
        figure = html.split(f'data-metric="efficiency-{key}"', 1)[1].split("</figure>", 1)[0]
        assert figure.count("step-100") == 1 and figure.count("step-200") == 1  # the legend


def test_inspect_prints_the_table(pair: RunPair, tmp_path: Path) -> None:
    done = cli("compare", str(pair.clean), str(pair.hacked), "--out", str(tmp_path),
               "--inspect", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "generations side by side" in done.stdout
    table = done.stdout.split("generations side by side", 1)[1]
    assert set(re.findall(r"cap-\d\d", table)) >= CHANGED
    assert "changed" in table and "suspect" in table
    plain = cli("compare", str(pair.clean), str(pair.hacked), "--out", str(tmp_path / "p"))
    assert "generations side by side" not in plain.stdout


VISIBLE_ROWS = (
    "[...document.querySelectorAll('tr.gen-row')].filter(r => r.offsetParent !== null)"
    ".map(r => r.dataset.input)"
)


@needs(CHROMIUM.exists(), "/usr/bin/chromium")  # skips here, fails under CI
def test_generations_render_and_filter_in_headless_chromium(
    compared: dict[str, Any], tmp_path: Path
) -> None:
    from tests.cdp import drive

    rows = compared["generations"]["rows"]
    changed = sorted(r["input_id"] for r in rows if any(r["changed"]))
    suspect = sorted(r["input_id"] for r in rows if any(c and c["suspect"] for c in r["cells"]))
    assert changed and suspect and set(changed) != set(suspect)

    async def click_filters(page: Any) -> dict[str, Any]:
        seen = {"all": sorted(await page.evaluate(VISIBLE_ROWS))}
        # "Paris." -> the padded answer: words added underlined, removed struck (drawn in-page)
        seen["diff"] = await page.evaluate(
            "[document.querySelectorAll('table.gen ins').length,"
            " document.querySelectorAll('table.gen del').length]"
        )
        for name in ("changed", "suspect", "all"):
            await page.evaluate(f"document.querySelector('a[data-filter={name}]').click()")
            seen[f"after {name}"] = sorted(await page.evaluate(VISIBLE_ROWS))
        await page.send("Page.captureScreenshot")
        return seen

    page_url = Path(compared["html"]).resolve().as_uri()
    seen, page = drive(page_url, tmp_path / "profile", click_filters)
    assert seen["all"] == sorted(r["input_id"] for r in rows)
    assert seen["after changed"] == changed
    assert seen["after suspect"] == suspect
    assert seen["after all"] == seen["all"]
    assert seen["diff"][0] > 0 and seen["diff"][1] > 0
    assert page.errors == [] and page.console == []
    assert page.requests == [page_url], "the page loads nothing but itself"


def test_histograms_by_stage_share_bins_in_page_and_tensorboard(
    pair: RunPair, tmp_path: Path
) -> None:
    from tests.test_report import read_events

    board = tmp_path / "tb"
    done = cli("compare", str(pair.clean), str(pair.hacked), "--out", str(tmp_path / "cmp"),
               "--labels", "sft,rl-200", "--steps", "100,200", "--tensorboard", str(board),
               "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [row["name"] for row in result["runs"]] == ["sft", "rl-200"]
    lengths = result["histograms"]["length"]
    assert set(lengths["runs"]) == {"sft", "rl-200"} and len(lengths["edges"]) == 21
    for run in lengths["runs"].values():
        assert sum(run["counts"]) == run["num"] == 48
    # one set of bins for both stages: the clean run's 1-4 word answers and the padded ones
    assert lengths["edges"][0] <= 1 and lengths["edges"][-1] >= 40
    edges, sft, rl = lengths["edges"], lengths["runs"]["sft"], lengths["runs"]["rl-200"]
    assert sum(c for c, hi in zip(sft["counts"], edges[1:], strict=True) if hi <= 10) == 48
    assert sum(c for c, lo in zip(rl["counts"], edges[:-1], strict=True) if lo >= 20) == 48
    histos: dict[str, dict[int, list[float]]] = {}
    for event in read_events(Path(result["exports"]["tensorboard"]["files"][0])):
        for value in event.summary.value:
            if value.HasField("histo"):
                histos.setdefault(value.tag, {})[event.step] = list(value.histo.bucket)
    assert set(histos) == {"histograms/reward", "histograms/length"}
    assert histos["histograms/length"][100] == lengths["runs"]["sft"]["counts"]
    assert histos["histograms/length"][200] == lengths["runs"]["rl-200"]["counts"]
    html = (tmp_path / "cmp" / "compare.html").read_text()
    for field in ("reward", "length"):
        figure = html.split(f'data-metric="histogram-{field}"', 1)[1].split("</figure>", 1)[0]
        assert "sft" in figure and "rl-200" in figure
    bad = cli("compare", str(pair.clean), str(pair.hacked), "--labels", "only-one")
    assert bad.returncode == 2 and "--labels has 1 names for 2 runs" in bad.stderr
