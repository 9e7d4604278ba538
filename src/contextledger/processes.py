"""Worker processes that inherit no thread pool and never outlive their parent.

Forking a process that has run Polars, Arrow or DuckDB copies their thread pools'
memory mid-flight (a lock held by a thread that does not exist in the child): a forked
worker segfaulted under load during garbage collection in ``decode_run``. So workers
come from a *forkserver*, a fresh interpreter started once per process that only
imports the reading code (:data:`PRELOAD`) and forks each worker from that quiet state
(``spawn`` is as safe but slower: docs/benchmarks.md). A process that is still one
thread and has imported no engine has no pool to copy: its workers are forked from it
directly, which spares the forkserver's interpreter and imports (what ``ledger`` does,
starting its workers before it imports the engines). Unlike multiprocessing's own
workers, ours never run the parent's ``__main__`` again, so a script that reads runs
needs no ``if __name__ == "__main__"`` guard. If the parent is killed (``kill -9``, the
OOM killer) nothing tells its workers: they would sit blocked on a pipe no one reads,
holding an archive's write lock. So each worker is killed the moment its parent dies.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import multiprocessing.context
import os
import select
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

Result = TypeVar("Result")

#: ``<linux/prctl.h>``: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1

#: How workers are started by a process that may hold thread pools: a forkserver (a
#: process that never ran one) forks them.
START_METHOD = "forkserver"

#: Modules that run thread pools of their own once imported or used (numpy: its BLAS
#: threads start at import): a process that has imported one is never forked.
THREADED_MODULES = ("polars", "pyarrow", "duckdb", "numpy", "pyspark")

#: What the forkserver imports before it forks a worker, so no worker imports it again:
#: the snapshot reader the pools run (msgspec and the reading layer; no engine, no Arrow)
#: and this module (each worker is started as one of its classes).
PRELOAD = ("contextledger.tables.files", "contextledger.processes")


def worker_pool(max_workers: int) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` whose workers start clean and die with this process.

    >>> with worker_pool(1) as pool:
    ...     pool.submit(abs, -3).result()
    3
    """
    method = start_method()
    context = _CONTEXTS[method]()
    if method == "forkserver":
        context.set_forkserver_preload(list(PRELOAD))
    pool = ProcessPoolExecutor(
        max_workers=max_workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(os.getpid(), dict(os.environ)),
    )
    if method == "fork":
        # a forked pool starts its workers at its first task, from the thread that
        # submits it: from this one, now, while it is the only one
        pool.submit(os.getpid)
    return pool


def start_method() -> str:
    """How :func:`worker_pool` would start workers now: ``"fork"`` from a process that is
    one thread (this one, the main thread) and has imported none of
    :data:`THREADED_MODULES` (on Linux, where forking such a process is safe), else
    :data:`START_METHOD`.
    """
    alone = threading.active_count() == 1 and threading.current_thread() is threading.main_thread()
    quiet = not any(name in sys.modules for name in THREADED_MODULES)
    if alone and quiet and sys.platform.startswith("linux"):
        return "fork"
    return START_METHOD


def _start_worker(parent: int, environ: dict[str, str]) -> None:
    """Give this worker its pool owner's environment as it is now (the forkserver holds
    the one it started with, and settings such as ``--max-document-mb`` travel in it, as
    they did to forked workers), then :func:`die_with_parent`."""
    os.environ.clear()
    os.environ.update(environ)
    die_with_parent(parent)


_MAIN_SWAP = threading.Lock()


@contextlib.contextmanager
def _main_left_behind() -> Iterator[None]:
    """While a worker is started, ``__main__`` is an empty module, so the worker is not
    told to run the parent's script again (multiprocessing re-runs it under ``spawn``
    and ``forkserver``; the pools run only this package's functions)."""
    with _MAIN_SWAP:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class _ForkServerProcess(multiprocessing.context.ForkServerProcess):
    def start(self) -> None:
        with _main_left_behind():
            super().start()


class _SpawnProcess(multiprocessing.context.SpawnProcess):
    def start(self) -> None:
        with _main_left_behind():
            super().start()


class _ForkServerContext(multiprocessing.context.ForkServerContext):
    Process = _ForkServerProcess


class _SpawnContext(multiprocessing.context.SpawnContext):
    Process = _SpawnProcess


#: Each start method's context (``fork``: multiprocessing's, kept for measuring).
_CONTEXTS = {
    "forkserver": _ForkServerContext,
    "spawn": _SpawnContext,
    "fork": lambda: multiprocessing.get_context("fork"),
}


def die_with_parent(parent: int) -> None:
    """End this worker when ``parent`` (the process whose pool it serves) dies, and now
    if it already has.

    A forkserver's worker is the server's child, not the pool owner's, and it keeps the
    server alive (it holds the server's liveness pipe), so the kernel's parent-death
    signal alone would never fire: a thread waits on the owner's pidfd instead.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == parent:
        return  # forked or spawned by the owner: the kernel's signal covers it
    try:
        handle = os.pidfd_open(parent)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here: the signal is all there is
        return
    threading.Thread(target=_exit_when_readable, args=(handle,), daemon=True).start()


def _exit_when_readable(handle: int) -> None:
    """Block until ``handle`` (a pidfd) says its process ended, then end this one."""
    select.select([handle], [], [])
    os._exit(1)


def map_ahead(
    function: Callable[..., Result],
    calls: Iterable[tuple[Any, ...]],
    workers: int,
    ahead: int = 2,
) -> Iterator[Result]:
    """``function(*arguments)`` for each of ``calls``, run in ``workers`` worker processes
    (:func:`worker_pool`), the results in the order of ``calls``. At most ``ahead``
    calls per worker are handed out before their results are taken, so ``calls`` can
    be read lazily (a batch of an archive at a time) without all of it in memory.

    >>> list(map_ahead(pow, [(2, 3), (3, 2)], workers=2))
    [8, 9]
    """
    pool = worker_pool(workers)
    pending: collections.deque[Future[Result]] = collections.deque()
    try:
        for arguments in calls:
            pending.append(pool.submit(function, *arguments))
            if len(pending) >= ahead * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
