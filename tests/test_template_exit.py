"""A worker ends its template before its interpreter tears down (issue 30's peak memory): the
teardown frees every object the worker holds, and so writes to nearly every page of its heap;
pages it still shares with a live template (forked from it) are copied by those writes. At 10k
rollouts the two workers' teardowns added ~35 MB to the run's peak PSS in their last 50 ms."""

from __future__ import annotations

import subprocess
import sys
import textwrap

WORKER = textwrap.dedent(
    """
    import os, select
    from rlenv.worker import template

    template.start_template(
        lambda name, args: None, closing=[], output=(2, 2), in_template=lambda name, args: None
    )
    PIDFD = os.pidfd_open(template.template_pid())


    class Probe:
        # freed in the interpreter's teardown, as the worker's objects are
        def __del__(self, write=os.write, ready=select.select, pidfd=PIDFD):
            ended = ready([pidfd], [], [], 0)[0]
            write(1, b"template ended" if ended else b"template alive")


    probe = Probe()
    """
)


def test_the_template_is_gone_before_the_worker_tears_down() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "template ended"
