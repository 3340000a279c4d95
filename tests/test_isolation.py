"""In-world code isolated like the sandbox (issue 13 item 3): the attack catalog of
`tests/isolation_catalog.py`, every attack held.

In-world attacks run as a tool of a real `rlenv run` whose orchestrator holds OPENAI_API_KEY and
another secret, against real host listeners; sandbox attacks run real programs through
`run_sandboxed`. `bench/isolation.py` prints the same catalog as a tried/held table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlenv.sandbox import _mechanism_works as mechanism_works
from rlenv.sandbox import probe_mechanism
from tests.conftest import cli, needs, read_jsonl
from tests.isolation_catalog import (
    NOISE_MARKERS,
    NOT_PROMISED,
    NOT_PROMISED_ON_RAY,
    SANDBOX_ATTACKS,
    WORLD_ATTACKS,
    orchestrator_environment,
    run_sandbox_attacks,
    run_world_attacks,
    write_noisy_env,
)

MECHANISMS = [m for m in ("bwrap", "unshare") if mechanism_works(m)] or ["missing"]


def _failed(outcomes: list) -> list[str]:
    return [f"{o.attack.name}: {o.detail}" for o in outcomes if not o.held]


def test_every_in_world_attack_is_held(tmp_path: Path) -> None:
    outcomes = run_world_attacks(tmp_path)
    assert [o.attack.name for o in outcomes] == [a.name for a in WORLD_ATTACKS]
    assert _failed(outcomes) == []


def test_the_worker_environment_is_the_documented_one(tmp_path: Path) -> None:
    """The variables in-world code sees are exactly the README's list (values aside); secret
    names are there with the placeholder only (`held` checks no value got through)."""
    from rlenv.sandbox import faketime_env
    from rlenv.world.environment import WORLD_VARIABLES, looks_secret

    env_attack = [a for a in WORLD_ATTACKS if a.name == "env_os_environ"]
    outcome = run_world_attacks(tmp_path, env_attack, detail_size=4000)[0]
    seen = set(outcome.detail.removeprefix("held: ").split(","))
    assert outcome.held
    # libfaketime's variables; FAKETIME_SHARED it sets itself in each process it is loaded
    # into (the names of its shared-memory segment), a worker's own since issue 26
    subprocess_clock = {*faketime_env("2024-03-01T12:00:00+00:00", "UTC"), "FAKETIME_SHARED"}
    rlenv_switches = {name for name in seen if name.startswith("RLENV_")}
    placeholders = {name for name in seen if looks_secret(name)}
    assert {"OPENAI_API_KEY", "RLENV_TEST_DB_PASSWORD"} <= placeholders
    assert seen <= set(WORLD_VARIABLES) | subprocess_clock | rlenv_switches | placeholders
    assert {"PATH", "TZ", "PYTHONHASHSEED"} <= seen


@needs(probe_mechanism() != "rlimits", "a namespace sandbox (bubblewrap or unshare)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_sandbox_attack_is_held(tmp_path: Path, mechanism: str) -> None:
    outcomes = run_sandbox_attacks(tmp_path, mechanism)
    assert [o.attack.name for o in outcomes] == [a.name for a in SANDBOX_ATTACKS]
    promised = [o for o in outcomes if (o.attack.name, mechanism) not in NOT_PROMISED]
    assert _failed(promised) == []


def test_in_world_attacks_under_ray(tmp_path: Path) -> None:
    """On Ray every attack is held as locally: env code runs in the worker an actor hosts."""
    pytest.importorskip("ray")
    outcomes = run_world_attacks(tmp_path, executor="ray")
    promised = [o for o in outcomes if o.attack.name not in NOT_PROMISED_ON_RAY]
    assert _failed(promised) == []


def test_policy_output_never_reaches_stdout_and_is_kept(tmp_path: Path) -> None:
    spec = write_noisy_env(tmp_path / "env")
    result = cli(
        "run", str(spec), "--out", str(tmp_path / "run"), "--json", env=orchestrator_environment()
    )
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # the whole of stdout is the one JSON document
    for marker in NOISE_MARKERS:
        assert marker not in result.stdout
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    for record in records:
        output = record["output"]
        for marker in NOISE_MARKERS:
            assert marker in output["stdout"] + output["stderr"], marker
        assert output["truncated"] is True  # the 100,000 X's were cut
        assert len(output["stdout"]) + len(output["stderr"]) <= 2 * 16 * 1024
        assert "IMPORT-TIME-PRINT" not in output["stdout"]  # not this rollout's


def test_policy_output_leaves_verify_and_the_digest_alone(tmp_path: Path) -> None:
    spec = write_noisy_env(tmp_path / "env")
    result = cli("verify", str(spec), "--runs", "2", "--perturb", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["identical"] is True
