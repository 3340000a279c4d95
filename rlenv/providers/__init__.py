"""Policy providers, resolved from model URIs (`scheme:rest`).

Built-in schemes register through the same table a plugin would use (``registry``, open to
the entry-point group ``rlenv.providers``); heavy providers import their dependencies inside
the factory.
"""

from __future__ import annotations

from rlenv.providers.base import (
    InWorldPolicy,
    ModelReply,
    ModelRequest,
    PolicyContext,
    Provider,
)
from rlenv.providers.registry import (
    ProviderScheme,
    make_in_world_policy,
    parse_model_uri,
    register,
    resolve_provider,
)

__all__ = [
    "InWorldPolicy",
    "ModelReply",
    "ModelRequest",
    "PolicyContext",
    "Provider",
    "ProviderScheme",
    "make_in_world_policy",
    "parse_model_uri",
    "register",
    "resolve_provider",
]
