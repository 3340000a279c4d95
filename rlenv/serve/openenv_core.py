"""openenv-core without its Gradio web UI: what `rlenv serve` and its client import.

Importing any part of ``openenv.core`` runs the package's ``__init__``, which imports the
optional web interface and with it Gradio (pandas, matplotlib, ...): about 6 s of CPU, more
than the rest of openenv-core, in every `rlenv serve` process and every client. rlenv never
shows that UI, and openenv guards the import (a missing Gradio leaves it ``None``), so the
first import of openenv is made with Gradio withheld. The web UI still works if asked for
(``ENABLE_WEB_INTERFACE``): `create_app` imports it again then, and Gradio with it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

WEB_UI = "gradio"


def web_ui_requested() -> bool:
    """Whether openenv's `create_app` will build its Gradio web UI (its own switch)."""
    return os.environ.get("ENABLE_WEB_INTERFACE", "false").lower() in ("true", "1", "yes")


@contextmanager
def without_web_ui() -> Iterator[None]:
    """Import openenv inside this block: Gradio is withheld for the block's imports unless it
    is loaded already or the web UI was asked for, and is importable again after it."""
    if WEB_UI in sys.modules or web_ui_requested():
        yield
        return
    sys.modules[WEB_UI] = None  # type: ignore[assignment]  # `import gradio` now fails
    try:
        yield
    finally:
        if WEB_UI in sys.modules and sys.modules[WEB_UI] is None:
            del sys.modules[WEB_UI]
