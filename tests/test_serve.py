"""Issue 29 items 1-2: `rlenv serve` is an OpenEnv server (openenv-core's create_app) over the
frozen world, tested with openenv-core's own client against the real server on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, cli, in_process, read_jsonl
from tests.serving import search_policy_path, served, stop, tool_call, tool_env

pytest.importorskip("openenv", reason="the serve extra (openenv-core)")

from rlenv.serve.openenv_core import without_web_ui  # noqa: E402

with without_web_ui():  # as rlenv's own client imports it: no Gradio
    from openenv.core.generic_client import GenericEnvClient

MAX_SESSIONS = 80


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("serve")
    spec = tool_env(root / "env")
    out = root / "served"
    with served(spec, out, "--workers", "2", "--max-sessions", str(MAX_SESSIONS)) as (url, _):
        yield url, out


async def _episode(url: str, input_id: str) -> tuple[dict[str, Any], Any]:
    """A whole episode of the tool env through openenv-core's client: look the word up, then
    answer it."""
    async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
        first = await env.reset(input_id=input_id)
        word = first.observation["messages"][-1]["content"].split()[-1]
        looked = await env.step(tool_call(word))
        assert not looked.done
        answer = json.loads(looked.observation["messages"][-1]["content"])["word"]
        last = await env.step({"content": answer})
        return last.observation, last


def _error(call: Any) -> str:
    with pytest.raises(RuntimeError) as caught:
        asyncio.run(call)
    return str(caught.value)


def test_an_episode_through_openenv_clients_and_its_state(
    tool_server: tuple[str, Path],
) -> None:
    url, out = tool_server

    async def go() -> None:
        async with GenericEnvClient(base_url=url) as env:
            described = await env.state()  # before reset: the env and its tools
            assert described["env"]["name"] == "test-env"
            assert described["tools"][0]["function"]["name"] == "lookup"
            first = await env.reset(input_id="h1")
            observation = first.observation
            assert observation["input_id"] == "h1" and not first.done
            assert observation["messages"] == [{"role": "user", "content": "say w1"}]
            assert observation["tools"][0]["function"]["name"] == "lookup"
            looked = await env.step(tool_call("w1"))
            tool = looked.observation["messages"]
            assert [m["role"] for m in tool] == ["tool"]
            assert json.loads(tool[0]["content"]) == {"length": 2, "word": "w1"}
            state = await env.state()
            assert state["input_id"] == "h1" and state["step_count"] == 1 and not state["done"]
            assert [m["role"] for m in state["messages"]] == ["user", "assistant", "tool"]
            assert state["tool_calls"][0]["name"] == "lookup"
            last = await env.step({"content": "w1"})
            assert last.done and last.reward == 1.0
            record = last.observation["record"]
            assert record["status"] == "ok" and record["passed"] is True
            assert last.observation["verifiers"][0]["passed"] is True
            assert (await env.state())["done"] is True

    asyncio.run(go())
    lines = [r for r in read_jsonl(out / "results.jsonl") if r["input_id"] == "h1"]
    assert lines and lines[0]["tool_calls"][0]["fixture"] == "none"


def test_64_concurrent_sessions_lose_no_episode(tool_server: tuple[str, Path]) -> None:
    url, out = tool_server
    before = len(read_jsonl(out / "results.jsonl"))

    async def many() -> list[tuple[dict[str, Any], Any]]:
        return await asyncio.gather(*(_episode(url, f"h{n % 4}") for n in range(64)))

    finished = asyncio.run(many())
    assert all(step.done and step.reward == 1.0 for _, step in finished)
    keys = {(obs["input_id"], obs["rollout"]) for obs, _ in finished}
    assert len(keys) == 64  # every episode its own rollout index
    records = read_jsonl(out / "results.jsonl")
    assert len(records) == before + 64
    written = {(r["input_id"], r["rollout"]): r for r in records}
    assert keys <= set(written)
    assert all(written[key]["status"] == "ok" for key in keys)


def test_bad_requests_get_one_clear_error_and_cost_nothing(
    tool_server: tuple[str, Path],
) -> None:
    url, out = tool_server
    before = len(read_jsonl(out / "results.jsonl"))

    async def session(*steps: Any) -> None:
        async with GenericEnvClient(base_url=url) as env:
            for step in steps:
                await step(env)

    def reset(input_id: str) -> Any:
        return lambda env: env.reset(input_id=input_id)

    def act(action: Any) -> Any:
        return lambda env: env.step(action)

    assert "no episode: reset first" in _error(session(act({"content": "x"})))
    assert "unknown input_id 'nope'" in _error(session(reset("nope")))
    assert "malformed action" in _error(session(reset("h0"), act({"tool_calls": "lookup"})))
    assert "unknown action field 'answer'" in _error(session(reset("h0"), act({"answer": "x"})))
    assert "neither content nor tool_calls" in _error(session(reset("h0"), act({})))
    assert "more than the limit" in _error(session(reset("h0"), act({"content": "x" * (9 << 20)})))
    message = _error(session(reset("h2"), act({"content": "w2"}), act({"content": "again"})))
    assert "is over (done): reset to start another" in message
    assert message.count("\n") == 0
    # only the episode that was finished was written; the refused requests changed nothing
    records = read_jsonl(out / "results.jsonl")
    assert len(records) == before + 1 and records[-1]["input_id"] == "h2"

    # after a refused action the same session goes on with its episode
    async def recover() -> Any:
        async with GenericEnvClient(base_url=url) as env:
            await env.reset(input_id="h3")
            with pytest.raises(RuntimeError, match="malformed action"):
                await env.step({"tool_calls": [{"function": {}}]})
            await env.step(tool_call("w3"))
            return await env.step({"content": "w3"})

    assert asyncio.run(recover()).reward == 1.0


def test_plain_http_contract(tool_server: tuple[str, Path]) -> None:
    """verl / NeMo RL style: POST /reset, then POST /step naming the episode; errors are 400
    with one line, an oversized body 413."""
    import httpx

    url, _ = tool_server
    with httpx.Client(base_url=url, timeout=120) as http:
        assert http.get("/health").json()["status"] == "healthy"
        assert "content" in http.get("/schema").json()["action"]["properties"]
        reset = http.post("/reset", json={"input_id": "h0"}).json()
        episode = reset["observation"]["episode_id"]
        looked = http.post("/step", json={"action": tool_call("w0"), "episode_id": episode})
        assert looked.status_code == 200 and looked.json()["done"] is False
        done = http.post("/step", json={"action": {"content": "w0"}, "episode_id": episode})
        assert done.json()["done"] is True and done.json()["reward"] == 1.0
        again = http.post("/step", json={"action": {"content": "w0"}, "episode_id": episode})
        assert again.status_code == 400 and "no episode" in again.json()["detail"]
        nameless = http.post("/step", json={"action": {"content": "w0"}})
        assert nameless.status_code == 400 and "pass episode_id" in nameless.json()["detail"]
        unknown = http.post("/reset", json={"input_id": "zzz"})
        assert unknown.status_code == 400 and "unknown input_id" in unknown.json()["detail"]
        big = http.post("/step", content=b"{" + b" " * (20 << 20) + b"}")
        assert big.status_code == 413 and "more than the limit" in big.json()["detail"]


def _readme_client_snippet() -> str:
    """The README's example of openenv-core's client against a served env."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    [block] = [b for b in blocks if "GenericEnvClient(base_url=" in b]
    return block


REWARD_MODEL = """
def score(prompt, answer, ctx, **options):
    \"\"\"A held-out reward model small enough for a test: short plain answers score higher.\"\"\"
    return 1.0 / (1 + len(answer or ""))
"""


def _search_env(root: Path) -> Path:
    """The bundled search env (its inputs, tool, cassette, verifiers and baseline policy, the
    files pinned as bundled) with a python reward model in place of MiniLM: the reward-model
    stage and the composite reward are graded as bundled, without loading torch twice (served
    and run), the most of this test's CPU. The MiniLM model runs in tests/test_bundled_envs.py."""
    shutil.copytree(ROOT / "envs" / "search_env", root / "search_env")
    (root / "held_out_rm.py").write_text(REWARD_MODEL)
    document = yaml.safe_load((ROOT / "envs" / "search.yaml").read_text())
    bundled = ROOT / "envs"
    for block in (document["inputs"], document["train_inputs"], document["tools"][0]["cassette"]):
        block["path"] = str((bundled / block["path"]).resolve())
    held_out = document["reward_model"]
    for name in ("train_data", "training_prompts"):
        held_out[name]["path"] = str((bundled / held_out[name]["path"]).resolve())
    held_out.pop("uri")
    held_out["function"] = "held_out_rm:score"
    command = document["services"][0]["command"]  # started by `record` only; its logical URL
    command[command.index("--corpus") + 1] = str(ROOT / "fixtures" / "search" / "corpus.jsonl")
    spec = root / "search.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def test_a_served_search_episode_has_the_digest_rlenv_run_gives(tmp_path: Path) -> None:
    """The search env, its baseline policy run client-side through openenv-core's client:
    each record equals (digest and all: reward-model score included) the one `rlenv run`
    writes for the same answers; the README's client example works as written; report,
    compare and check read the served run directory."""
    search_policy_path()
    from search_env.policies import baseline

    spec = _search_env(tmp_path / "env")
    model = "python:search_env.policies:baseline"
    ran = cli(
        "run", str(spec), "--limit", "2", "--rollouts", "1", "--workers", "1",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    expected = {r["input_id"]: r for r in read_jsonl(tmp_path / "run" / "results.jsonl")}
    assert all(record["reward"] is not None for record in expected.values())

    out = tmp_path / "served"
    with served(spec, out, "--workers", "1", "--model", model) as (
        url,
        process,
    ):

        async def play(input_id: str) -> dict[str, Any]:
            async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
                result = await env.reset(input_id=input_id)
                tools = result.observation["tools"]
                while not result.done:
                    messages = (await env.state())["messages"]
                    if not messages:
                        messages = result.observation["messages"]
                    reply = baseline(messages, tools, None)
                    action = {"content": reply} if isinstance(reply, str) else reply
                    result = await env.step(action)
                record = dict(result.observation["record"])
                # the composite reward `rlenv.trl` trains on: verifiers' pass + the RM's score
                assert result.reward == float(record["passed"]) + record["reward"], record
                return record

        served_records = {i: asyncio.run(play(i)) for i in sorted(expected)}
        readme = _readme_client_snippet().replace("http://envhost:8000", url)
        scope: dict[str, Any] = {}
        exec(compile(readme, "README.md", "exec"), scope)  # the README's example, as written
        assert scope["last"].done and scope["last"].observation["record"]["passed"] is True
        output, errors = stop(process)
    for input_id, record in served_records.items():
        assert record["digest"] == expected[input_id]["digest"], (record, expected[input_id])
    assert "served 3 episodes; digest" in output, errors
    # the readers of run directories take the served one (called in this process: what is
    # tested is the library behind each command, whose entry point other tests go through)
    checked = in_process("check", str(out))
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    report = in_process("report", str(out))
    assert report.exit_code == 0, report.stderr
    compared = in_process(
        "compare", str(tmp_path / "run"), str(out), "--out", str(tmp_path / "cmp")
    )
    assert compared.exit_code == 0, compared.stderr
    assert json.loads((out / "run.json").read_text())["model"]["uri"] == model


def test_help_stays_light_and_bad_arguments_are_one_line(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    # `rlenv --help` and a refused `rlenv serve` (rlenv.serve.server) import no server library;
    # serving imports openenv-core without its Gradio web UI (seconds of CPU rlenv never uses)
    probe = (
        "import json, sys, rlenv.cli, rlenv.serve.server\n"
        "def heavy(): return sorted({m.split('.')[0] for m in sys.modules}"
        " & {'openenv', 'fastapi', 'uvicorn', 'gradio'})\n"
        "before = heavy()\n"
        "import rlenv.serve.app\n"
        "from rlenv.serve.openenv_core import without_web_ui\n"
        "with without_web_ui(): import openenv.core.generic_client\n"
        "print(json.dumps([before, heavy()]))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr
    before, serving = json.loads(loaded.stdout)
    assert before == [], before
    assert "openenv" in serving and "gradio" not in serving, serving
    assert "serve" in cli("--help").stdout
    spec = tool_env(tmp_path / "env")
    missing = cli("serve", str(tmp_path / "nope.yaml"), "--port", "0")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    split = cli("serve", str(spec), "--port", "0", "--split", "test", "--out", str(tmp_path / "o"))
    assert split.returncode == 2 and "--split must be heldout or train" in split.stderr
    assert not (tmp_path / "o").exists()  # refused before the run directory was made
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = cli("serve", str(spec), "--port", port, "--out", str(tmp_path / "b"))
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert busy.stderr.count("\n") == 1 and not (tmp_path / "b").exists()
