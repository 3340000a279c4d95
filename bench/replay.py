"""Replay lookups through rlenv's cassette index: 10 000 interactions, 10 000 requests.

In-process, as a frozen-world worker does it (`replay_cassette`): load the cassette
into `rlenv.world.replay.ToolIndex`, enter the replay context, then send 10 000 real httpx
requests that the light path (`rlenv.world.replay_http`) answers from the index; for contrast
the same through vcrpy's httpx stub (`replay_cassette(light=False)`). Reported separately:

- cassette load: vcrpy's YAML load of the file, building the index (a key per interaction), and
  `ToolIndex.load()` with an empty and with a filled index cache (RLENV_CACHE_DIR, a temp dir);
- index matching: `ToolIndex.key_for` + dict lookup for 10 000 requests, without httpx/vcrpy;
- end to end: 10 000 `httpx.Client.post` calls through the light path and the index, then
  through vcrpy's stub and the index (every answer is checked against the one recorded);
- httpx alone: the same calls answered by an `httpx.MockTransport` (client overhead floor).

Target: the 10 000 lookups' matching cost well under a second. For contrast, vcrpy's own
Cassette with match_on=[method, uri, body] (scans every interaction per request), timed on a
sample of lookups against 250 and 1 000 interactions and extrapolated.
Run: `.venv/bin/python bench/replay.py [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGET_S = 0.5  # "well under a second" for 10 000 lookups' matching, read as: at most half


def vcr_request(index: int) -> Any:
    """The vcrpy Request the httpx stub builds for lookup `index` (same body and headers)."""
    from vcr.request import Request

    body = json.dumps({"term": common.input_key(index)}, separators=(",", ":")).encode()
    headers = {
        "host": "lookup.bench.invalid",
        "content-type": "application/json",
        "content-length": str(len(body)),
        "accept": "*/*",
    }
    return Request("POST", common.FAKE_URL, body, headers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer vcrpy contrast lookups")
    args = parser.parse_args()
    count = 10000
    vcr_samples = 20 if args.quick else 100
    common.header("replay: rlenv cassette index vs vcrpy matching")

    import httpx
    import vcr

    os.environ["RLENV_CACHE_DIR"] = str(common.RLENV_CACHE)  # empty, this run's own
    from rlenv.world.replay import ToolIndex, load_interactions, replay_cassette
    from rlenv.world.scrub import Scrubber

    rows: list[list[str]] = []
    with common.temp_dir("bench-replay-") as root:
        cassette = common.write_cassette(root / "lookup.yaml", count)
        size_mb = cassette.stat().st_size / 1e6

        # -- cassette load, split into vcrpy's YAML load and the index build
        started = time.perf_counter()
        interactions = load_interactions(cassette)
        parsed = time.perf_counter() - started
        index = ToolIndex("lookup", None, Scrubber())
        started = time.perf_counter()
        for request, response in interactions:
            index.responses.setdefault(index.key_for(request), response)
        built = time.perf_counter() - started
        del interactions
        started = time.perf_counter()
        index = ToolIndex("lookup", cassette, Scrubber()).load()
        loaded = time.perf_counter() - started  # cold: the index cache is empty
        started = time.perf_counter()
        index = ToolIndex("lookup", cassette, Scrubber()).load()
        cached = time.perf_counter() - started
        assert len(index.responses) == count, "distinct interactions collapsed in the index"
        rows.append(["cassette load: vcrpy YAML load", f"{count}", f"{parsed:.3f}", ""])
        rows.append(
            [
                "cassette load: index build (key per interaction)",
                f"{count}",
                f"{built:.3f}",
                f"{built / count * 1e6:.1f}",
            ]
        )
        rows.append(
            ["cassette load: ToolIndex.load(), empty index cache", f"{count}", f"{loaded:.3f}", ""]
        )
        rows.append(
            [
                "cassette load: ToolIndex.load(), from the index cache",
                f"{count}",
                f"{cached:.3f}",
                "",
            ]
        )

        # -- index matching alone
        requests = [vcr_request(number) for number in range(count)]
        started = time.perf_counter()
        found = [index.responses.get(index.key_for(request)) for request in requests]
        matching = time.perf_counter() - started
        assert all(response is not None for response in found), "index lookup missed"
        started = time.perf_counter()
        keys = [index.key_for(request) for request in requests]
        keying = time.perf_counter() - started
        started = time.perf_counter()
        for key in keys:
            index.responses.get(key)
        dict_only = time.perf_counter() - started
        rows.append(
            [
                "index matching: key_for + dict get",
                f"{count}",
                f"{matching:.3f}",
                f"{matching / count * 1e6:.1f}",
            ]
        )
        rows.append(
            [
                "  of which key_for (scrub URL+body, canonical key, sha256)",
                f"{count}",
                f"{keying:.3f}",
                f"{keying / count * 1e6:.1f}",
            ]
        )
        rows.append(
            [
                "  of which dict get",
                f"{count}",
                f"{dict_only:.4f}",
                f"{dict_only / count * 1e6:.2f}",
            ]
        )

        # -- end to end, as a worker replays (`replay_cassette`): the light path, and for
        # contrast vcrpy's httpx stub in front of the same lookup (light=False)
        calls = {"key_for": 0}
        original_key_for = index.key_for

        def counted_key_for(request: Any) -> str:
            calls["key_for"] += 1
            return original_key_for(request)

        client = httpx.Client(timeout=10.0)
        end_to_end: dict[bool, float] = {}
        per_request: dict[bool, int] = {}
        for light in (True, False):
            with replay_cassette(
                {"lookup": index}, root / ".replay-none.yaml", light=light
            ) as replaying:
                cassette_class = type(replaying)
                cassette_class.current = "lookup"
                calls["key_for"] = 0
                index.key_for = counted_key_for  # type: ignore[method-assign]
                client.post(common.FAKE_URL, json={"term": common.input_key(0)})
                per_request[light] = calls["key_for"]
                index.key_for = original_key_for  # type: ignore[method-assign]
                started = time.perf_counter()
                answers = [
                    client.post(common.FAKE_URL, json={"term": common.input_key(number)}).json()
                    for number in range(count)
                ]
                end_to_end[light] = time.perf_counter() - started
            wrong = [
                n for n, answer in enumerate(answers) if answer["answer"] != common.answer_for(n)
            ]
            assert not wrong, f"{len(wrong)} replies were another request's (first: {wrong[0]})"
            outcomes = {event.outcome for event in cassette_class.events}
            assert outcomes == {"hit"}, outcomes

        def answer(request: httpx.Request) -> httpx.Response:
            term = json.loads(request.content)["term"]
            return httpx.Response(200, json={"answer": "v" + term[1:]})

        mock = httpx.Client(transport=httpx.MockTransport(answer), timeout=10.0)
        started = time.perf_counter()
        for number in range(count):
            mock.post(common.FAKE_URL, json={"term": common.input_key(number)}).json()
        httpx_only = time.perf_counter() - started
        light_rest = end_to_end[True] - httpx_only - matching * per_request[True]
        stub = end_to_end[False] - httpx_only - matching * per_request[False]
        for label, seconds in (
            ("end to end: httpx.post, light path (as a worker replays)", end_to_end[True]),
            ("  httpx alone (MockTransport)", httpx_only),
            (f"  index matching ({per_request[True]} key_for per request)", matching),
            ("  light path rest (difference; no cookie extraction)", light_rest),
            ("end to end: httpx.post through vcrpy's stub + ReplayCassette", end_to_end[False]),
            (
                f"  index matching ({per_request[False]} key_for per request)",
                matching * per_request[False],
            ),
            ("  vcrpy stub + ReplayCassette rest (difference)", stub),
        ):
            rows.append([label, f"{count}", f"{seconds:.3f}", f"{seconds / count * 1e6:.1f}"])

        print(f"cassette: {count} interactions, {size_mb:.1f} MB of vcrpy YAML")
        print(common.table(["what", "n", "seconds", "us each"], rows))
        print()

        # -- vcrpy's own matching, for contrast
        contrast = []
        per_lookup: dict[int, float] = {}
        for interactions_count in (250, 1000):
            path = common.write_cassette(
                root / f"vcr-{interactions_count}.yaml", interactions_count
            )
            recorder = vcr.VCR(record_mode="none", match_on=["method", "uri", "body"])
            step = interactions_count // vcr_samples
            picks = [number * step + step // 2 for number in range(vcr_samples)]
            started = time.perf_counter()
            with recorder.use_cassette(str(path)):
                opened = time.perf_counter() - started
                started = time.perf_counter()
                for number in picks:
                    reply = client.post(common.FAKE_URL, json={"term": common.input_key(number)})
                    assert reply.json()["answer"] == common.answer_for(number)
                elapsed = time.perf_counter() - started
            per_lookup[interactions_count] = elapsed / len(picks)
            contrast.append(
                [
                    f"{interactions_count}",
                    f"{len(picks)}",
                    f"{opened:.3f}",
                    f"{elapsed:.2f}",
                    f"{elapsed / len(picks) * 1000:.1f}",
                ]
            )
        print(
            f"vcrpy {vcr.__version__} Cassette, match_on=[method, uri, body]"
            " (lookups spread over the cassette)"
        )
        print(
            common.table(
                ["interactions", "lookups", "load s", "lookups s", "ms per lookup"], contrast
            )
        )
        scale = per_lookup[1000] / per_lookup[250]
        extrapolated_1k = per_lookup[1000] * 1000
        extrapolated_10k = per_lookup[1000] * 10 * count
        print(f"per-lookup cost grows {scale:.1f}x from 250 to 1000 interactions (a scan: ~4x)")
        print(
            f"extrapolated: 1 000 lookups on 1 000 interactions: {extrapolated_1k:.0f} s;"
            f" 10 000 lookups on 10 000 interactions (linear scan): {extrapolated_10k:.0f} s"
            f" ({extrapolated_10k / 3600:.1f} h)"
        )
        print(
            "rlenv index, 10 000 lookups on 10 000 interactions, end to end:"
            f" {end_to_end[True]:.2f} s"
            f" ({extrapolated_10k / end_to_end[True]:.0f}x less than the vcrpy extrapolation)"
        )
        print()
        as_replayed = matching * per_request[True]
        print(
            f"target: matching cost of 10 000 lookups well under a second (<= {TARGET_S} s):"
            f" {as_replayed:.3f} s as replay does it ({per_request[True]} key_for per request;"
            f" {matching:.3f} s for one)  {common.verdict(as_replayed <= TARGET_S)}"
        )


if __name__ == "__main__":
    main()
