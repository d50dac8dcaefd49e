"""`build_sharded_store` checks its arguments before anything starts: each bad value raises the
library's `InputError` naming it, and no cluster is started and nothing is written (the
checks of `graphbatch.datasets._shard_files.checked_build`)."""

from __future__ import annotations

import pytest

from graphbatch._errors import InputError
from graphbatch.datasets import build_sharded_store

CASES = [
    ({"engine": "spark"}, r"unknown engine 'spark'"),
    ({"out": "store.h5"}, r"\.json file, got .*store\.h5"),
    ({"address": "tcp://127.0.0.1:1", "workers": 2}, r"--workers sizes a local cluster"),
    ({"retries": -1}, r"retries must be >= 0, got -1"),
    ({"dataset": "nope"}, r"unknown dataset 'nope'"),
    ({"dataset": "code", "limit": 5}, r"--limit counts functions"),
    ({"shards": 10, "limit": 3}, r"--shards 10 is more than the 3 source records"),
    ({"graph": "delaunay"}, r"unknown graph construction 'delaunay'"),
    ({"targets": ["y"]}, r"--column and --target apply to smiles, not qm9"),
]


@pytest.mark.parametrize(("change", "message"), CASES, ids=[m for _, m in CASES])
def test_bad_arguments_fail_before_anything_starts(tmp_path, change, message):
    kwargs = {"dataset": "qm9", "out": "m.json", "shards": 2, **change}
    dataset, out = kwargs.pop("dataset"), tmp_path / "set" / kwargs.pop("out")
    with pytest.raises(InputError, match=message):
        build_sharded_store(dataset, out, **kwargs)
    assert list(tmp_path.iterdir()) == []  # no folder, shard, manifest or marker


def test_valid_arguments_pass_the_checks(tmp_path):
    """The same call with good arguments gets past every check: it fails only where the
    source is read (an empty folder holds no QM9), so the cases above fail by their value."""
    with pytest.raises((InputError, OSError)) as info:
        build_sharded_store(
            "qm9", tmp_path / "set" / "m.json", shards=2, source=str(tmp_path / "none"), workers=1
        )
    assert "none" in str(info.value)
