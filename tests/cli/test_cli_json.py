"""The CLI's ``--json`` outputs are a public contract (checked independently of these tests):
one JSON value on one line, written by ``json.dumps`` with its defaults (``", "`` and ``": "``
separators, ASCII, no indentation), with these keys in this order and these JSON types. A change
here is a change of the contract: record it in CHANGELOG.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.cli import main

from .._lowband_graphs import random_collection

STATS = {  # graphbatch plan --json (PlanStats.as_dict, plus the output path)
    "strategy": "str",
    "num_graphs": "int",
    "num_batches": "int",
    "lower_bound": "int",
    "batches_over_bound": "float",
    "node_efficiency": "float",
    "edge_efficiency": "float",
    "graph_efficiency": "float",
    "distinct_shapes": "int",
    "graphs_per_batch_min": "int",
    "graphs_per_batch_mean": "float",
    "graphs_per_batch_max": "int",
    "max_pad_nodes": "int",
    "max_pad_edges": "int",
    "max_pad_graphs": "int",
    "skipped": "int",
    "cost_source": "str",
    "cost_per_node": "float",
    "cost_per_edge": "float",
    "cost_max": "float",
    "cost_p99": "float",
    "cost_mean": "float",
    "cost_max_over_mean": "float",
    "padded_cost_max": "float",
    "world_size": "int",
    "num_steps": "int",
    "step_node_imbalance_mean": "float",
    "step_node_imbalance_max": "float",
    "step_edge_imbalance_mean": "float",
    "step_edge_imbalance_max": "float",
    "padding_only_batches": "int",
    "padding_only_share": "float",
}
QUANTILES = {f"p{q}": "float" for q in (0, 1, 5, 25, 50, 75, 95, 99, 100)}
COLUMN = {
    "total": "int",
    "min": "int",
    "max": "int",
    "mean": "float",
    "std": "float",
    "skewness": "float",
    "excess_kurtosis": "float",
    "padding_efficiency": "float",
    "potential_speedup": "float",
    "quantiles": QUANTILES,
}
BOUNDS = {"128": "float", "256": "float", "512": "float", "1024": "float"}
EXPECTED = {
    "plan": {**STATS, "plan_seconds": "float", "out": "str"},
    "analyze": {
        "source": "str",
        "num_graphs": "int",
        "distinct_pairs": "int",
        "nodes": COLUMN,
        "edges": COLUMN,
    },
    "compare": {
        "source": "str",
        "batch_size": "int",
        "world_size": "int",
        "seed": "int",
        "on_oversize": "str",
        "budget": ["int"],
        "results": [
            {
                "label": "str",
                "strategy": "str",
                "options": "object",
                **{k: v for k, v in STATS.items() if k != "strategy"},
                "cost_unit": "str",
                "plan_seconds": "float",
                "error": "null",
            }
        ],
    },
    "limits": [
        {
            "max_nodes": "int",
            "max_edges": "int",
            "max_graphs": "int",
            "node_eff": "float",
            "edge_eff": "float",
            "harmonic_mean": "float",
            "num_packs": "int",
            "exact": "bool",
        }
    ],
    "bandwidth": {
        "input": "str",
        "edges": "int",
        "edge_types": "int",
        "num_graphs": "int",
        "num_nodes": "int",
        "max_nodes": "int",
        "max_bandwidth_before": "int",
        "max_bandwidth_after": "int",
        "mean_bandwidth_before": "float",
        "mean_bandwidth_after": "float",
        "median_bandwidth_after": "float",
        "share_rcm_narrower": "float",
        "share_below": BOUNDS,
        "share_below_before": BOUNDS,
        "share_nodes_below": BOUNDS,
        "ratio_quantiles": {
            "q10": "float",
            "q25": "float",
            "q50": "float",
            "q75": "float",
            "q90": "float",
        },
        "share_ratio_at_least_3": "float",
        "ratio_bin_edges": ["float"],
        "ratio_counts": ["int"],
        "coverage": [],
    },
}
TYPES = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null"}


def structure(value, like):
    """``value``'s keys (in order) and JSON types, shaped like ``like`` ("object": any dict)."""
    if like == "object":
        return "object" if isinstance(value, dict) else TYPES.get(type(value), "?")
    if isinstance(value, dict):
        sub = like if isinstance(like, dict) else {}
        return {k: structure(v, sub.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        inner = like[0] if isinstance(like, list) and like else None
        return [structure(v, inner) for v in value[:1]] if value else []
    return TYPES.get(type(value), "?")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("json")
    n = np.random.default_rng(0).integers(2, 20, 300)
    gb.GraphSizes(n, n * 3).save(d / "s.npz")
    random_collection(4, 30, max_nodes=60, max_band=10).save(d / "g.npz")
    return d


COMMANDS = {
    "plan": lambda d: [
        "plan",
        f"{d}/s.npz",
        "--strategy",
        "dynamic",
        "--batch-size",
        "16",
        "--out",
        f"{d}/p.npz",
        "--json",
    ],
    "analyze": lambda d: ["analyze", f"{d}/s.npz", "--json"],
    "compare": lambda d: ["compare", f"{d}/s.npz", "--batch-size", "16", "--json"],
    "limits": lambda d: ["limits", f"{d}/s.npz", "--max-graphs", "16", "--json"],
    "bandwidth": lambda d: ["bandwidth", f"{d}/g.npz", "--json"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_json_output_keys_types_and_format(command, inputs, capsys):
    assert main(COMMANDS[command](inputs)) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one line
    value = json.loads(out)
    assert json.dumps(value) + "\n" == out  # json.dumps defaults: separators, ASCII, order
    assert structure(value, EXPECTED[command]) == EXPECTED[command]
    if command == "compare":  # every result row has the same keys
        first = list(value["results"][0])
        assert all(list(r) == first for r in value["results"])
