"""Worker processes that never outlive the process that started them.

A process pool's workers are forked children. If the parent is killed (``kill -9``,
the OOM killer) nothing tells them: they sit blocked writing results to a pipe no
one reads, holding whatever they inherited, an archive's write lock included, so
every later ingest is refused until someone finds and kills them. Every pool the
package starts comes from :func:`worker_pool`, whose workers ask the kernel (Linux
``prctl(PR_SET_PDEATHSIG, SIGKILL)``) to be killed the moment their parent dies,
and exit at once if it died before they asked.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

#: ``<linux/prctl.h>``: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def worker_pool(max_workers: int) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` whose workers die with this process.

    >>> with worker_pool(1) as pool:
    ...     pool.submit(abs, -3).result()
    3
    """
    method = multiprocessing.get_start_method()
    # a forkserver's workers are its children, not ours; it exits when we do, and so they
    parent = os.getpid() if method in ("fork", "spawn") else None
    return ProcessPoolExecutor(
        max_workers=max_workers, initializer=die_with_parent, initargs=(parent,)
    )


def die_with_parent(parent: int | None) -> None:
    """Have the kernel kill this process when its parent dies; exit now if ``parent``
    (its pid when this process was started) is already gone (it died before we asked)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)
