"""Policy providers, resolved from model URIs (`scheme:rest`).

Built-in schemes register through the same table a plugin would use; heavy providers import
their dependencies inside the factory.
"""

from __future__ import annotations

from rlenv.providers.base import (
    ModelReply,
    ModelRequest,
    PolicyContext,
    Provider,
    parse_model_uri,
    resolve_provider,
)

__all__ = [
    "ModelReply",
    "ModelRequest",
    "PolicyContext",
    "Provider",
    "parse_model_uri",
    "resolve_provider",
]
