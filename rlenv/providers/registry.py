"""The one table from model-URI scheme (``scheme:rest``) to provider factory.

Each scheme is a ``ProviderScheme``: the form shown in errors, a factory for the
orchestrator-side ``Provider`` and, for providers that run inside the frozen world (python,
replay), a factory for the worker-side ``InWorldPolicy``. Factories import their module inside
the function, so an unused provider costs nothing (the OpenAI client, torch...).

The built-in schemes register through ``register`` like any other. A package adds a scheme
with an entry point in the group ``rlenv.providers`` named after the scheme and pointing at a
``ProviderScheme`` or at a bare provider factory ``(uri, rest, *, base_url, options)``;
entry points are read only for a scheme that is not built in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rlenv.errors import UserError
from rlenv.providers.base import InWorldPolicy, Provider

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "rlenv.providers"


class ProviderFactory(Protocol):
    def __call__(
        self, uri: str, rest: str, *, base_url: str | None, options: dict[str, Any]
    ) -> Provider: ...


@dataclass(frozen=True)
class ProviderScheme:
    name: str
    form: str
    """How a URI of this scheme looks, for error messages: "openai:MODEL"."""
    provider: ProviderFactory
    in_world: Callable[[str], InWorldPolicy] | None = None
    """The worker-side policy of a provider whose rollouts run inside the frozen world."""


_SCHEMES: dict[str, ProviderScheme] = {}


def register(scheme: ProviderScheme) -> ProviderScheme:
    """Add (or replace) a scheme in the table."""
    _SCHEMES[scheme.name] = scheme
    return scheme


# --------------------------------------------------------------------------- built in


def _python(uri: str, rest: str, *, base_url: str | None, options: dict[str, Any]) -> Provider:
    from rlenv.providers.python import InWorldProvider

    if ":" not in rest:
        raise UserError(
            f"bad model URI {uri!r}: expected python:pkg.module:function", where="--model"
        )
    return InWorldProvider(uri)


def _python_policy(uri: str) -> InWorldPolicy:
    from rlenv.providers.python import PythonPolicy

    return PythonPolicy(uri)


def _replay(uri: str, rest: str, *, base_url: str | None, options: dict[str, Any]) -> Provider:
    from rlenv.providers.replay import ReplayProvider

    return ReplayProvider.open(uri, rest)


def _replay_policy(uri: str) -> InWorldPolicy:
    from rlenv.providers.replay import ReplayPolicy

    return ReplayPolicy(uri)


def _openai(uri: str, rest: str, *, base_url: str | None, options: dict[str, Any]) -> Provider:
    from rlenv.providers.openai import OpenAIProvider

    return OpenAIProvider(uri, rest, base_url=base_url, **options)


def _hf(uri: str, rest: str, *, base_url: str | None, options: dict[str, Any]) -> Provider:
    from rlenv.providers.hf import HFProvider

    return HFProvider(uri, rest, **options)


register(ProviderScheme("python", "python:pkg.module:function", _python, _python_policy))
register(ProviderScheme("replay", "replay:FILE.jsonl", _replay, _replay_policy))
register(ProviderScheme("openai", "openai:MODEL", _openai))
register(ProviderScheme("hf", "hf:PATH", _hf))


# --------------------------------------------------------------------------- plugins


def _plugins(name: str | None = None) -> list[EntryPoint]:
    from importlib.metadata import entry_points  # not at import: it costs startup time

    found = entry_points(group=ENTRY_POINT_GROUP)
    return [ep for ep in found if name is None or ep.name == name]


def _plugin(name: str) -> ProviderScheme | None:
    """The scheme an installed package registers under ``name``, or None."""
    for entry in _plugins(name):
        try:
            loaded = entry.load()
        except Exception as exc:
            raise UserError(
                f"model scheme {name!r}: cannot load plugin {entry.value!r}:"
                f" {type(exc).__name__}: {exc}",
                where="--model",
            ) from None
        if isinstance(loaded, ProviderScheme):
            return loaded
        if callable(loaded):
            return ProviderScheme(name, f"{name}:...", loaded)
        raise UserError(
            f"model scheme {name!r}: plugin {entry.value!r} is neither a ProviderScheme nor"
            " a provider factory",
            where="--model",
        )
    return None


def _forms() -> str:
    forms = [scheme.form for scheme in _SCHEMES.values()]
    forms += [f"{entry.name}:..." for entry in _plugins() if entry.name not in _SCHEMES]
    return ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else forms[0]


def _lookup(name: str) -> ProviderScheme | None:
    return _SCHEMES.get(name) or _plugin(name)


# --------------------------------------------------------------------------- resolving


def known_schemes() -> list[str]:
    """Built-in schemes, then those installed packages register."""
    return [*_SCHEMES, *(entry.name for entry in _plugins() if entry.name not in _SCHEMES)]


def scheme_of(uri: str) -> tuple[ProviderScheme, str]:
    """The scheme of ``scheme:rest`` and ``rest``; a one-line UserError naming the accepted
    forms when the URI is malformed or its scheme unknown."""
    name, sep, rest = uri.partition(":")
    scheme = _lookup(name) if sep and rest and name else None
    if scheme is None:
        raise UserError(f"bad model URI {uri!r}: expected {_forms()}", where="--model")
    return scheme, rest


def parse_model_uri(uri: str) -> tuple[str, str]:
    """Split ``scheme:rest`` for a known scheme; raise a UserError naming the accepted forms."""
    scheme, rest = scheme_of(uri)
    return scheme.name, rest


def resolve_provider(
    uri: str, *, base_url: str | None = None, options: dict[str, Any] | None = None
) -> Provider:
    """Build the orchestrator-side provider for a model URI."""
    scheme, rest = scheme_of(uri)
    return scheme.provider(uri, rest, base_url=base_url, options=dict(options or {}))


def make_in_world_policy(uri: str) -> InWorldPolicy:
    """Build the worker-side policy of an in-world model URI (python:, replay:)."""
    name = uri.partition(":")[0]
    scheme = _lookup(name)
    if scheme is None or scheme.in_world is None:
        raise ValueError(f"not an in-world model URI: {uri}")
    return scheme.in_world(uri)
