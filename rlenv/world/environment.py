"""The environment variables in-world code runs with: a short allow-list, never a secret.

A frozen-world worker (where python policies, tools, verifiers and the python reward model
run) starts from `world_environment`, not from the orchestrator's environment, so
OPENAI_API_KEY and the like are not in its `os.environ`, its `/proc/self/environ` or what its
subprocesses inherit. A worker is exec'd with exactly these variables (`env -i`), also the one
a Ray actor hosts. README "What in-world code can reach" lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rlenv.world.freeze import FROZEN_ENV
from rlenv.world.scrub import REDACTED
from rlenv.world.secrets import SECRET_ENV_NAME

PLACE_VARIABLES = (
    # where programs, libraries and the user's files are (a tool may run `git` or `python`)
    "PATH",
    "HOME",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    # local model caches, so an in-world reward model loads from disk
    "HF_HOME",
    "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "TORCH_HOME",
    "XDG_CACHE_HOME",
    "SENTENCE_TRANSFORMERS_HOME",
    # certificate bundles for an https reward-model endpoint (paths, not keys)
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
)
"""World variables that name places on a machine (another machine's may not exist here)."""

WORLD_VARIABLES = (
    # the frozen world: time zone, locale, hash seed (set to FROZEN_ENV's values)
    "TZ",
    "LC_ALL",
    "LANG",
    "PYTHONHASHSEED",
    *PLACE_VARIABLES,
    # offline switches
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    # devices and thread counts
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
)
"""Names passed from the orchestrator to in-world code (when set there), besides rlenv's own
``RLENV_*`` switches. A name that looks like a secret (`SECRET_ENV_NAME`: OPENAI_API_KEY,
GITHUB_TOKEN, DB_PASSWORD...) is never passed with its value: it is set to `PLACEHOLDER`."""

PLACEHOLDER = REDACTED
"""The value every secret-looking variable has in the world: the string the scrubber put where
the secret was in the recorded cassettes, so a tool that reads its key from the environment
still sends the request it recorded (and replay matches it), without the key."""


def looks_secret(name: str) -> bool:
    return SECRET_ENV_NAME.search(name) is not None


def world_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a frozen-world worker starts with: `WORLD_VARIABLES` and ``RLENV_*``
    from ``environ`` (default: this process's), every secret-looking name set to
    `PLACEHOLDER`, and `FROZEN_ENV`. Nothing else (proxies neither: their URLs can carry
    credentials)."""
    source = os.environ if environ is None else environ
    passed = {}
    for name, value in source.items():
        if name.startswith("RAY_"):
            continue  # Ray's own settings (its auth token too) are Ray's to pass, never the world's
        if looks_secret(name):
            passed[name] = PLACEHOLDER
        elif name in WORLD_VARIABLES or name.startswith("RLENV_"):
            passed[name] = value
    return {**passed, **FROZEN_ENV}
