"""Freezing a worker process: environment variables, the Python clock, subprocesses' clock.

Each is applied once for the life of the process (freezegun walks every loaded module when it
starts, so it starts once); nothing here is undone.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

FROZEN_ENV = {"TZ": "UTC", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
"""Time zone, locale and hash seed of the frozen world; a spawned worker starts with them."""


def freeze_environment() -> None:
    """Set `FROZEN_ENV` in this process (and so in the children it starts) and re-read TZ."""
    os.environ.update(FROZEN_ENV)
    time.tzset()


def freeze_subprocess_clock(variables: dict[str, str]) -> None:
    """Subprocesses a tool starts read the spec's instant too: put libfaketime's `variables`
    (`rlenv.sandbox.faketime_env`; empty when libfaketime is not installed) in the environment,
    keeping the caller's PYTHONPATH after the sleep fix."""
    if not variables:
        return
    variables = dict(variables)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if variables["PYTHONPATH"] in paths:  # a local worker starts under libfaketime already
        variables["PYTHONPATH"] = os.environ["PYTHONPATH"]
    elif os.environ.get("PYTHONPATH"):
        variables["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    os.environ.update(variables)


def freeze_python_clock(instant: datetime) -> Any:
    """Start freezegun at `instant` for the whole process; return the started freezer."""
    import freezegun.api
    from freezegun import freeze_time

    freezegun.api._get_module_attributes = _module_attributes
    freezer = freeze_time(instant)
    freezer.start()
    _real_datetime_for_extensions()
    # freezegun hands the real clock to a caller with an ignored module (threading,
    # multiprocessing, queue...) among its five callers' frames: a tool called from a
    # pool worker's entry point has multiprocessing as its fifth. Nothing in the world may.
    freezegun.api.call_stack_inspection_limit = 0
    return freezer


def _module_attributes(module: Any) -> list[tuple[str, Any]]:
    """What freezegun looks through in a loaded module for a clock function bound at import
    (``from time import time``): the module's own namespace. freezegun's own walk is
    ``dir()`` then ``getattr`` of each name, which loads every attribute of a lazy module:
    transformers' exports hundreds of model classes that way, and a worker with an embedding
    reward model spent most of its start (tens of seconds of CPU) importing them at the
    freeze. A lazy attribute not loaded yet holds no clock function to replace."""
    try:
        namespace = vars(module)
    except TypeError:
        return []
    return list(namespace.items())


def _real_datetime_for_extensions() -> None:
    """C extensions imported after the freeze see the real ``datetime`` classes while they load.

    freezegun replaces ``datetime.datetime``/``date`` with Python subclasses; an extension
    compiled against the C datetime API (pandas' tslibs, through sklearn into the embedding
    reward model, or any env code that imports pandas) checks those types' size as it loads,
    and with the fakes it crashed the worker (a segfault). Only the loading sees the real
    classes; afterwards every value it gets is still the frozen one (a subclass instance).
    """
    import datetime as datetime_module
    import importlib.machinery

    import freezegun.api

    loader = importlib.machinery.ExtensionFileLoader
    if getattr(loader, "_rlenv_real_datetime", False):
        return
    real = {"datetime": freezegun.api.real_datetime, "date": freezegun.api.real_date}

    def with_real_datetime(method: Any) -> Any:
        def wrapped(self: Any, *args: Any) -> Any:
            saved = {name: getattr(datetime_module, name) for name in real}
            for name, value in real.items():
                setattr(datetime_module, name, value)
            try:
                return method(self, *args)
            finally:
                for name, value in saved.items():
                    setattr(datetime_module, name, value)

        return wrapped

    loader.create_module = with_real_datetime(loader.create_module)  # type: ignore[method-assign]
    loader.exec_module = with_real_datetime(loader.exec_module)  # type: ignore[method-assign]
    loader._rlenv_real_datetime = True  # type: ignore[attr-defined]
