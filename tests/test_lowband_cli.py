"""``graphbatch bandwidth``: output equals the library's numbers; clear errors on bad input."""

from __future__ import annotations

import json

import numpy as np

from graphbatch.cli import main
from graphbatch.lowband import (
    EdgeGraphs, apply_reordering, band_coverage, bandwidth_summary, bandwidths, reduce_bandwidth,
)

from .lowband_graphs import random_collection


def test_bandwidth_json_matches_library(tmp_path, capsys):
    g = random_collection(4, 30, max_nodes=60, max_band=10)
    g.save(tmp_path / "g.npz")
    rc = main(["bandwidth", str(tmp_path / "g.npz"), "--json", "--bounds", "4", "8", "16",
               "--block-sizes", "8", "16", "--num-blocks", "8", "--out",
               str(tmp_path / "r.npz")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    r = reduce_bandwidth(g)
    want = bandwidth_summary(g.n_node, r.before, r.after, (4, 8, 16)).as_dict()
    assert out["share_below"] == {str(k): v for k, v in want["share_below"].items()}
    assert out["max_bandwidth_after"] == want["max_bandwidth_after"]
    assert out["edges"] == g.num_edges
    # the written file holds the reordered graphs
    h = EdgeGraphs.load(tmp_path / "r.npz")
    assert np.array_equal(bandwidths(h), r.after)
    cov = band_coverage(apply_reordering(g, r), [8, 16], 8)
    assert out["coverage"] == json.loads(json.dumps(cov))


def test_bandwidth_table_and_errors(tmp_path, capsys):
    g = random_collection(5, 10)
    g.save(tmp_path / "g.npz")
    assert main(["bandwidth", str(tmp_path / "g.npz")]) == 0
    text = capsys.readouterr().out
    assert "share bw < B (RCM)" in text and "N/B from" in text
    g.sizes().save(tmp_path / "sizes.npz")
    assert main(["bandwidth", str(tmp_path / "sizes.npz")]) == 2
    assert "size table has no edges" in capsys.readouterr().err
    assert main(["bandwidth", str(tmp_path / "missing.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "x.csv").write_text("1,2\n")
    assert main(["bandwidth", str(tmp_path / "x.csv")]) == 2
    assert "cannot read graphs" in capsys.readouterr().err
    assert main(["bandwidth", str(tmp_path / "g.npz"), "--block-sizes", "0"]) == 2
    assert "block_size must be >= 1, got 0" in capsys.readouterr().err
