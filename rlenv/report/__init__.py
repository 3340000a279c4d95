"""Reports over run directories: the run page, the cross-checkpoint comparison and exports.

Everything heavy (matplotlib, jinja2, tensorboardX, wandb) is imported inside the functions.
"""

from rlenv.report.common import format_flags, load_run
from rlenv.report.compare import compare, format_compare_table
from rlenv.report.export import export_tensorboard, export_wandb
from rlenv.report.html import write_report

__all__ = [
    "compare",
    "export_tensorboard",
    "export_wandb",
    "format_compare_table",
    "format_flags",
    "load_run",
    "write_report",
]
