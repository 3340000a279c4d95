"""Importers: frozen rlenv specs from tasks written for other harnesses (Inspect AI,
lm-evaluation-harness)."""

from rlenv.importers.common import ImportResult
from rlenv.importers.inspect_task import import_inspect
from rlenv.importers.lm_eval import import_lm_eval

__all__ = ["ImportResult", "import_inspect", "import_lm_eval"]
