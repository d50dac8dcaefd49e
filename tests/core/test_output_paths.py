"""Issue 26, part 5: no command writes over one of its inputs -- by the same path, a symlink or
a hard link, or a shard a manifest names -- and outputs carry the suffix of their format.

`graphbatch data sizes STORE --out STORE` replaced the store with its size table (exit 0);
`graphbatch data convert OLD --out x.npz` wrote a store named ``.npz``. Every refusal is one
line, exit status 2, and leaves the input byte for byte as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("h5py")

from graphbatch import GraphSizes
from graphbatch.cli import main
from graphbatch.datasets import synthetic_graphs, synthetic_sizes, write_store


def _store(path: Path) -> Path:
    """A store at ``path`` (written as ``.h5``, then renamed: the name may say otherwise)."""
    g = synthetic_graphs(synthetic_sizes(30, rng=0), rng=1)
    return write_store(path.with_suffix(".h5"), [g], name="t").rename(path)


def _aliases(target: Path, folder: Path, name: str) -> list[Path]:
    """``target`` itself, a symlink to it and a hard link to it, named ``name`` (+ suffix)."""
    folder.mkdir(parents=True, exist_ok=True)
    sym, hard = folder / f"sym-{name}", folder / f"hard-{name}"
    sym.symlink_to(target)
    os.link(target, hard)
    return [target, sym, hard]


def _refused(argv, inputs, capsys, match) -> None:
    before = {p: p.read_bytes() for p in inputs}
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} was changed"


def test_data_sizes_never_replaces_its_store(tmp_path, capsys):
    store = _store(tmp_path / "store.npz")  # a store whose name says .npz
    for out in _aliases(store, tmp_path / "a", "store.npz"):
        _refused(["data", "sizes", store, "--out", out], [store], capsys, "is the input file")
    _refused(
        ["data", "sizes", store, "--out", tmp_path / "sizes.h5"],
        [store],
        capsys,
        "must end in .npz",
    )
    assert main(["data", "sizes", str(store), "--out", str(tmp_path / "ok.npz")]) == 0


def test_data_convert_and_build_refuse_inputs_and_wrong_suffixes(tmp_path, capsys):
    from .._stores import write_v2

    g = synthetic_graphs(synthetic_sizes(20, rng=2), rng=3)
    old = write_v2(tmp_path / "old.h5", g)
    for out in _aliases(old, tmp_path / "a", "old.h5"):
        _refused(["data", "convert", old, "--out", out], [old], capsys, "is the input file")
    _refused(
        ["data", "convert", old, "--out", tmp_path / "x.npz"],
        [old],
        capsys,
        "must end in .h5 or .hdf5",
    )
    assert not (tmp_path / "x.npz").exists()
    src = tmp_path / "mols.csv"
    src.write_text("smiles\nCCO\n")
    _refused(
        ["data", "build", "moses", "--source", src, "--out", src],
        [src],
        capsys,
        "is the input file",
    )
    _refused(
        ["data", "build", "moses", "--source", src, "--out", tmp_path / "m.csv"],
        [src],
        capsys,
        "must end in .h5",
    )
    link = tmp_path / "mols.h5"
    os.link(src, link)
    _refused(
        ["data", "build", "moses", "--source", src, "--out", link],
        [src],
        capsys,
        "is the input file",
    )
    _refused(["data", "build", "qm9", "--out", tmp_path / "q.npz"], [], capsys, "must end in .h5")


def test_plan_report_and_bandwidth_refuse_their_inputs_and_shards(tmp_path, capsys):
    from graphbatch.datasets._manifest import write_manifest_of_shards

    sizes_path = GraphSizes(np.arange(1, 30), np.arange(1, 30) * 2).save(tmp_path / "s.npz")
    for out in _aliases(sizes_path, tmp_path / "a", "s.npz"):
        _refused(
            ["plan", sizes_path, "--strategy", "dynamic", "--batch-size", "4", "--out", out],
            [sizes_path],
            capsys,
            "is the input file",
        )
    _refused(
        [
            "plan",
            sizes_path,
            "--strategy",
            "dynamic",
            "--batch-size",
            "4",
            "--out",
            tmp_path / "plan.h5",
        ],
        [sizes_path],
        capsys,
        "must end in .npz",
    )
    # a sharded store: no output may replace the manifest or any shard it names
    d = tmp_path / "set"
    d.mkdir()
    g = synthetic_graphs(synthetic_sizes(20, rng=4), rng=5)
    shards = [
        write_store(d / f"p{k}.h5", [g.take(np.arange(10 * k, 10 * k + 10))], name="t")
        for k in range(2)
    ]
    manifest = d / "set.json"
    write_manifest_of_shards(manifest, shards, name="t", meta={}, build={})
    inputs = [manifest, *shards]
    shard_link = tmp_path / "shard-link.npz"
    os.link(shards[1], shard_link)
    _refused(
        ["plan", manifest, "--strategy", "dynamic", "--batch-size", "4", "--out", shard_link],
        inputs,
        capsys,
        "is the input file",
    )
    _refused(["data", "sizes", manifest, "--out", shard_link], inputs, capsys, "is the input file")
    html = tmp_path / "shard.html"
    os.link(shards[0], html)
    _refused(["report", manifest, "--out", html, "--quiet"], inputs, capsys, "is the input file")
    _refused(
        ["report", sizes_path, "--out", tmp_path / "r.npz", "--quiet"],
        [sizes_path],
        capsys,
        "must end in .html",
    )
    store = _store(tmp_path / "g.h5")
    for out in _aliases(store, tmp_path / "b", "g.h5"):
        _refused(["bandwidth", store, "--out", out], [store], capsys, "is the input file")


def test_bench_refuses_an_output_folder_holding_its_store(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    store = _store(out / "results.json")  # a store file named like a result
    _refused(
        [
            "bench",
            "--data",
            "store",
            "--store",
            store,
            "--models",
            "schnet",
            "--strategies",
            "dynamic",
            "--batch-sizes",
            "8",
            "--steps",
            "2",
            "--out",
            out,
        ],
        [store],
        capsys,
        "is the input file",
    )


def test_atomic_writes_never_replace_non_files(tmp_path, capsys):
    sizes_path = GraphSizes(np.arange(1, 30), np.arange(1, 30)).save(tmp_path / "s.npz")
    (tmp_path / "dir.npz").mkdir()
    _refused(
        [
            "plan",
            sizes_path,
            "--strategy",
            "dynamic",
            "--batch-size",
            "4",
            "--out",
            tmp_path / "dir.npz",
        ],
        [sizes_path],
        capsys,
        "is not a regular file",
    )
