"""The reward-model stage: resolve a reward-model URI to a scoring callable.

    rm:DIR        a head trained by `rlenv rm train` (DIR/head.npz + DIR/manifest.json)
    hf-rm:DIR     a transformers AutoModelForSequenceClassification checkpoint; reward = logit[0]
    http(s)://... POST {"prompt": [messages], "answer": str} -> {"reward": float}

Relative directories are resolved against the spec's directory. Every scorer is a callable
``(prompt_messages, answer) -> float`` with ``score_many`` for batches and ``identity()`` for
run metadata; heavy libraries are imported only when a scorer is built.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rlenv.canonical import manifest_hash, sha256_file
from rlenv.errors import InfraError, UserError

Prompt = str | Sequence[dict[str, Any]]


class RewardScorer(Protocol):
    uri: str

    def __call__(self, prompt: Prompt, answer: str) -> float: ...

    def score_many(self, prompts: Sequence[Prompt], answers: Sequence[str]) -> list[float]: ...

    def identity(self) -> dict[str, Any]: ...


def _messages(prompt: Prompt) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(message) for message in prompt]


def _finite(value: float, uri: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"reward model {uri} returned {value}")
    return value


class EmbeddingRewardModel:
    """A linear head from `rlenv rm train` over frozen all-MiniLM-L6-v2 embeddings."""

    def __init__(self, directory: Path, uri: str | None = None) -> None:
        from rlenv.rm.train import FORMAT, HEAD_FILE, MANIFEST_FILE

        self.directory = directory
        self.uri = uri or f"rm:{directory}"
        head_path, manifest_path = directory / HEAD_FILE, directory / MANIFEST_FILE
        for path in (head_path, manifest_path):
            if not path.is_file():
                raise UserError(
                    f"reward model file missing: {path.name} (train one with `rlenv rm train`)",
                    where=str(directory),
                )
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
            with np.load(head_path, allow_pickle=False) as head:
                self.weights = np.asarray(head["weights"], dtype=np.float64)
                length_mean, length_std = (float(v) for v in head["length"])
        except (ValueError, KeyError, OSError, json.JSONDecodeError) as exc:
            raise UserError(f"unreadable reward model: {exc}", where=str(directory)) from None
        if self.manifest.get("format") != FORMAT:
            raise UserError(
                f"not an rlenv reward model (format {self.manifest.get('format')!r})",
                where=str(manifest_path),
            )
        self.length_feature = bool(self.manifest["head"]["length_feature"])
        self.length_mean, self.length_std = length_mean, length_std
        if self.weights.shape != (385 if self.length_feature else 384,):
            raise UserError(f"head has shape {self.weights.shape}", where=str(head_path))
        self.head_sha256 = sha256_file(head_path)

    def check_embedding(self) -> None:
        """Refuse to score with a different embedding model than the head was trained on."""
        from rlenv.rm.embed import model_identity

        trained = self.manifest.get("embedding", {}).get("weights_sha256")
        current = model_identity()["weights_sha256"]
        if trained != current:
            raise UserError(
                f"embedding weights differ from the ones the head was trained on"
                f" ({str(trained)[:12]}… vs {current[:12]}…)",
                where=str(self.directory),
            )

    def score_many(self, prompts: Sequence[Prompt], answers: Sequence[str]) -> list[float]:
        from rlenv.rm.train import features

        if not prompts:
            return []
        rows = features(
            prompts,
            answers,
            length_feature=self.length_feature,
            length_mean=self.length_mean,
            length_std=self.length_std,
        )
        # each row's dot product alone, exactly rounded (math.fsum): a matrix product's
        # summation order depends on the number of rows and on the CPU's BLAS kernels
        weights = self.weights
        return [_finite(math.fsum(row * weights), self.uri) for row in rows]

    def __call__(self, prompt: Prompt, answer: str) -> float:
        return self.score_many([prompt], [answer])[0]

    def identity(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "head_sha256": self.head_sha256,
            "data_sha256": self.manifest.get("data", {}).get("sha256"),
            "embedding": self.manifest.get("embedding", {}).get("name"),
        }


class HFRewardModel:
    """A local sequence-classification checkpoint; the reward is the first logit."""

    def __init__(self, directory: Path, uri: str | None = None) -> None:
        self.directory = directory
        self.uri = uri or f"hf-rm:{directory}"
        if not (directory / "config.json").is_file():
            raise UserError("not a transformers checkpoint (no config.json)", where=str(directory))
        try:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError:
            raise UserError(
                "hf-rm: reward models need transformers and torch: install 'rlenv[hf]'"
            ) from None
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            str(directory), local_files_only=True
        )
        self.model.eval()

    def _text(self, prompt: Prompt, answer: str) -> str:
        messages = [*_messages(prompt), {"role": "assistant", "content": answer}]
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False))
        from rlenv.rm.train import prompt_text

        return f"{prompt_text(prompt)}\n{answer}"

    def __call__(self, prompt: Prompt, answer: str) -> float:
        """One answer alone (no padding), on one torch thread: the score does not depend on
        what else is scored, nor on the thread count (as rlenv.rm.embed)."""
        torch = self._torch
        encoded = self.tokenizer(self._text(prompt, answer), return_tensors="pt", truncation=True)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                logits = self.model(**encoded).logits
        finally:
            torch.set_num_threads(threads)
        return _finite(float(logits[0][0]), self.uri)

    def score_many(self, prompts: Sequence[Prompt], answers: Sequence[str]) -> list[float]:
        return [self(prompt, answer) for prompt, answer in zip(prompts, answers, strict=True)]

    def identity(self) -> dict[str, Any]:
        return {"uri": self.uri, "checkpoint_sha256": manifest_hash(self.directory)}


class HTTPRewardModel:
    """A reward-model server: POST {"prompt": [messages], "answer": str} -> {"reward": float}."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.uri = url
        self.timeout = timeout

    def __call__(self, prompt: Prompt, answer: str) -> float:
        import httpx

        try:
            response = httpx.post(
                self.uri, json={"prompt": _messages(prompt), "answer": answer}, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise InfraError(f"reward model {self.uri} unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise InfraError(f"reward model {self.uri} returned HTTP {response.status_code}")
        try:
            value = response.json()["reward"]
        except (ValueError, KeyError, TypeError):
            raise InfraError(
                f"reward model {self.uri}: expected JSON {{'reward': number}}"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InfraError(f"reward model {self.uri}: 'reward' is not a number")
        return _finite(float(value), self.uri)

    def score_many(self, prompts: Sequence[Prompt], answers: Sequence[str]) -> list[float]:
        return [self(prompt, answer) for prompt, answer in zip(prompts, answers, strict=True)]

    def identity(self) -> dict[str, Any]:
        return {"uri": self.uri}


def _directory(rest: str, spec_root: Path | str | None, scheme: str) -> Path:
    if not rest:
        raise UserError(f"bad reward model URI {scheme}: (expected {URI_FORMS})")
    path = Path(rest).expanduser()
    if not path.is_absolute() and spec_root is not None:
        path = Path(spec_root) / path
    path = path.resolve()
    if not path.is_dir():
        raise UserError(f"reward model directory not found: {path}", where=f"{scheme}:{rest}")
    return path


# --------------------------------------------------------------------------- URI schemes

SpecRoot = Path | str | None


def _rm_files(uri: str, rest: str, spec_root: SpecRoot) -> dict[str, str]:
    from rlenv.rm.train import HEAD_FILE, MANIFEST_FILE

    directory = _directory(rest, spec_root, "rm")
    hashes = {}
    for name in (HEAD_FILE, MANIFEST_FILE):
        if not (directory / name).is_file():
            raise UserError(f"reward model file missing: {name}", where=str(directory))
        hashes[f"reward_model.{name}"] = sha256_file(directory / name)
    calibration = directory / "calibration.json"  # rlenv.rm.calibration.CALIBRATION_FILE
    if calibration.is_file():
        hashes["reward_model.calibration.json"] = sha256_file(calibration)
    return hashes


def _rm_load(uri: str, rest: str, spec_root: SpecRoot) -> RewardScorer:
    model = EmbeddingRewardModel(_directory(rest, spec_root, "rm"), uri)
    model.check_embedding()
    return model


def _hf_files(uri: str, rest: str, spec_root: SpecRoot) -> dict[str, str]:
    return {"reward_model.checkpoint": manifest_hash(_directory(rest, spec_root, "hf-rm"))}


def _hf_load(uri: str, rest: str, spec_root: SpecRoot) -> RewardScorer:
    return HFRewardModel(_directory(rest, spec_root, "hf-rm"), uri)


def _http_files(uri: str, rest: str, spec_root: SpecRoot) -> dict[str, str]:
    return {}


def _http_load(uri: str, rest: str, spec_root: SpecRoot) -> RewardScorer:
    return HTTPRewardModel(uri)


@dataclass(frozen=True)
class RewardScheme:
    """One reward-model URI form: how to fingerprint its files and how to load it."""

    prefixes: tuple[str, ...]
    form: str
    files: Callable[[str, str, SpecRoot], dict[str, str]]
    """(uri, rest after the prefix, spec root) -> {name: sha256}, without loading anything."""
    load: Callable[[str, str, SpecRoot], RewardScorer]


SCHEMES: dict[str, RewardScheme] = {
    "rm": RewardScheme(("rm:",), "rm:DIR", _rm_files, _rm_load),
    "hf-rm": RewardScheme(("hf-rm:",), "hf-rm:DIR", _hf_files, _hf_load),
    "http": RewardScheme(("http://", "https://"), "http(s)://URL", _http_files, _http_load),
}
"""Reward-model URI schemes; each entry imports its heavy libraries only when used."""

_FORMS = [scheme.form for scheme in SCHEMES.values()]
URI_FORMS = ", ".join(_FORMS[:-1]) + " or " + _FORMS[-1]
"""The accepted forms, for error messages: "rm:DIR, hf-rm:DIR or http(s)://URL"."""


def reward_scheme(uri: str) -> tuple[RewardScheme, str]:
    """The scheme of a reward-model URI and the rest after its prefix; UserError otherwise."""
    for scheme in SCHEMES.values():
        for prefix in scheme.prefixes:
            if uri.startswith(prefix):
                return scheme, uri[len(prefix) :]
    raise UserError(f"bad reward model URI {uri!r}: expected {URI_FORMS}")


def is_reward_uri(text: str) -> bool:
    """Whether ``text`` is written as a reward-model URI (rather than a bare directory)."""
    return text.startswith(tuple(p for scheme in SCHEMES.values() for p in scheme.prefixes))


def reward_model_files(uri: str, spec_root: Path | str | None = None) -> dict[str, str]:
    """sha256 of the files a reward-model URI points at (for the env fingerprint), no loading."""
    scheme, rest = reward_scheme(uri)
    return scheme.files(uri, rest, spec_root)


def load_reward_model(uri: str, spec_root: Path | str | None = None) -> RewardScorer:
    """Build the scorer for a reward-model URI (relative paths against ``spec_root``)."""
    scheme, rest = reward_scheme(uri)
    return scheme.load(uri, rest, spec_root)
