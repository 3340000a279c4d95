"""The spec's building blocks: strict models, file references, import references and the one
statement of how rlenv calls each kind of python callable a spec names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlenv.canonical import SAFE_INTEGER
from rlenv.spec_data import CALLABLES, signature  # noqa: F401  (re-exported)

IMPORT_REF = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class Strict(BaseModel):
    # floats are finite: NaN and infinities have no canonical JSON form
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class FileRef(Strict):
    path: str
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


class PinnedFile(Strict):
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Decoding(Strict):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int = Field(512, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: list[str] = Field(default_factory=list)
    seed: int | None = Field(None, ge=-SAFE_INTEGER, le=SAFE_INTEGER)


class Fallback(Strict):
    status: int = 200
    body: Any = None


class McpServer(Strict):
    """An MCP server a tool is served by: a stdio `command` (run in the spec's directory) or a
    streamable HTTP `url`; `tool` is its name there (default: the spec tool's name). Only
    `validate` and `record` reach it: `run` replays the tool's cassette."""

    command: list[str] | None = Field(None, min_length=1)
    url: str | None = Field(None, pattern=r"^https?://")
    tool: str | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("mcp: give exactly one of 'command' (stdio) or 'url' (HTTP)")
        return self
