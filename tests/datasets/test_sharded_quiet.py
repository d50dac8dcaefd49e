"""The local cluster of a sharded build keeps the engine's log quiet in its worker processes
too (issue 37): a build called off by SIGTERM closes the cluster under busy workers, whose
heartbeats then met a closed scheduler and Dask printed "Failed to communicate with scheduler
during heartbeat" with a traceback per worker beside the one-line report (2 of 7 SIGTERMs of
``graphbatch data build --shards`` here; the CLI case is
``test_sigterm_calls_the_sharded_build_off_in_one_line``)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("distributed")


def _levels() -> dict[str, int]:
    return {
        name: logging.getLogger(name).getEffectiveLevel()
        for name in ("distributed", "distributed.worker", "distributed.core", "distributed.nanny")
    }


def test_the_build_cluster_logs_nothing_below_critical_in_its_workers():
    from graphbatch.datasets._dask_engine import close_client, start_client

    client, cluster = start_client(None, 1, preload="graphbatch.datasets._cluster")
    try:
        levels = list(client.run(_levels).values())
    finally:
        close_client(client, cluster)
    assert len(levels) == 1
    assert all(v >= logging.CRITICAL for v in levels[0].values()), levels
