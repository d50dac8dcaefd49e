"""Each pytest-xdist worker's share of the CPU cores for the native thread pools.

torch (OpenMP, MKL) and NumPy (OpenBLAS) start one compute thread per core in every process,
and their idle threads busy-wait. With N workers on C cores, each running torch in its own
process and in the processes its tests start, N * C spinning threads share C cores: a torch
training loop then takes several times its CPU time (two workers on two cores: about 4x).
`share_cores` gives every worker, and every process it starts, ``C // N`` threads (at least
one) unless the environment already sets them; a single process (no xdist, or ``-n 0``) keeps
the libraries' defaults. Tests that check thread settings set them explicitly."""

from __future__ import annotations

import os

#: The thread-count variables of the OpenMP, MKL and OpenBLAS runtimes (read at their load).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def share_cores() -> None:
    """Set the `THREAD_VARS` not already set to this worker's share of the cores, when pytest
    runs this process as one of several xdist workers (``PYTEST_XDIST_WORKER_COUNT``)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers <= 1:
        return
    share = str(max(1, cores() // workers))
    for name in THREAD_VARS:
        os.environ.setdefault(name, share)
