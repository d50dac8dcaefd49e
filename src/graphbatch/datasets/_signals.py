"""Signals in the worker processes of a build (`quiet_worker`).

Ctrl-C in a terminal sends SIGINT to the whole process group: the build's worker processes
(extxyz/ASE-db conversion, MOSES SMILES, a local Dask cluster's workers) get it as well as the
``graphbatch data build`` process. The parent stops the build -- one line, temporaries removed
(`graphbatch.cli`) -- and ends its workers; a worker that raised ``KeyboardInterrupt`` itself
would print a traceback of its own on the way. So workers are started with SIGINT blocked
(`sigint_held`: the mask is inherited, from the first instruction of the new interpreter on)
and set up by `quiet_worker`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_worker", "sigint_held"]


def quiet_worker(*, default_sigterm: bool = True) -> None:
    """Set up this worker process of a build: SIGINT ignored (the parent process handles it
    and ends this one) and, with ``default_sigterm``, SIGTERM at its default action (a worker
    the parent terminates ends at once, rather than running a handler it inherited through
    ``fork``). Nothing outside the main thread, the only one that may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if default_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def sigint_held() -> Iterator[None]:
    """SIGINT blocked in this thread while inside: processes (and threads) started here
    inherit the blocked mask, so a worker never sees Ctrl-C -- not even while its interpreter
    starts, before `quiet_worker` could run -- and this process gets a SIGINT that arrived
    meanwhile as soon as it leaves."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
