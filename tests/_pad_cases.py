"""Padded batches of every collation path, and their content digests.

`cases(tmp)` yields ``(name, output)`` for a representative set of batches: torch `collate` /
`collate_dict` over PyG ``Data`` and dicts (QM9 molecules, synthetic molecules, edge features,
graph labels, count fields, custom pads, all-padding batches, geometry by default and with a
``cutoff``), the torch store batch path, the NumPy kernel `pad_batch` in both layouts, the JAX
`collate` (jraph's layout; dict, array and ``None`` feature trees, int32 and int64 indices) and
the JAX store path. Inputs are made only from seeded integers and uniform draws and QM9's file
values (no float computation that could differ between machines), so `digest` of each output is
the same everywhere. tests/core/test_pad_golden.py pins the digests of the tree before the padding
kernel was shared (commit dcc14dd): every padded output must stay bit-identical (values, dtypes,
shapes, PyG bookkeeping).
"""

from __future__ import annotations

import hashlib

import numpy as np


# ------------------------------------------------------------------ digests
def _flat(obj, path: str, out: list) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        a = obj.detach().cpu()
        out.append(
            (
                path,
                f"torch.{str(a.dtype).split('.')[-1]}",
                tuple(a.shape),
                a.contiguous().view(torch.uint8).numpy().tobytes() if a.numel() else b"",
            )
        )
    elif isinstance(obj, np.ndarray) or type(obj).__module__.startswith("jax"):
        a = np.asarray(obj)
        out.append((path, a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()))
    elif hasattr(obj, "_slice_dict") and hasattr(obj, "keys"):  # a PyG Batch
        out.append((path + ".type", type(obj).__name__ + "/" + type(obj).__mro__[1].__name__))
        for k in sorted(obj.keys()):
            _flat(obj[k], f"{path}.{k}", out)
        _flat(dict(obj._slice_dict), path + "._slice_dict", out)
        _flat(dict(obj._inc_dict), path + "._inc_dict", out)
        out.append((path + ".num_graphs", obj.num_graphs, obj.num_nodes))
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _flat(obj[k], f"{path}[{k!r}]", out)
    elif hasattr(obj, "_fields"):  # NamedTuple (GraphsTuple, PaddedGraphs)
        out.append((path + ".type", type(obj).__name__))
        for k in obj._fields:
            _flat(getattr(obj, k), f"{path}.{k}", out)
    elif hasattr(obj, "__dataclass_fields__"):  # PaddedArrays
        for k in obj.__dataclass_fields__:
            if k not in ("buffer", "offsets"):
                _flat(getattr(obj, k), f"{path}.{k}", out)
    elif isinstance(obj, (list, tuple)):
        out.append((path + ".len", type(obj).__name__, len(obj)))
        for i, v in enumerate(obj):
            _flat(v, f"{path}[{i}]", out)
    else:
        out.append((path, repr(obj)))


def digest(obj) -> str:
    """sha256 over every array's path, dtype, shape and bytes (and every other value's repr)."""
    items: list = []
    _flat(obj, "", items)
    h = hashlib.sha256()
    for item in items:
        h.update(repr(item[:-1] if isinstance(item[-1], bytes) else item).encode())
        if isinstance(item[-1], bytes):
            h.update(item[-1])
    return h.hexdigest()[:20]


# ------------------------------------------------------------------ inputs
def qm9_arrays(n: int = 120):
    """QM9's first ``n`` molecules (``z``, ``pos``, ``y``, ``index`` from the file) with complete
    graphs (integer construction) and seeded edge features."""
    from graphbatch.datasets import GraphArrays, load_qm9

    mols = load_qm9(n)
    rng = np.random.default_rng(29)
    ei, ne = [], []
    for k in mols.n_node.tolist():
        s, r = np.nonzero(~np.eye(k, dtype=bool))
        ei.append(np.stack([s, r]))
        ne.append(s.shape[0])
    ei = np.concatenate(ei, axis=1).astype(np.int32)
    e = ei.shape[1]
    return GraphArrays(
        n_node=mols.n_node,
        n_edge=np.asarray(ne, dtype=np.int64),
        edge_index=ei,
        node={"z": mols.z.astype(np.uint8), "pos": mols.pos.astype(np.float32)},
        edge={
            "edge_dist": rng.random(e).astype(np.float32),
            "bond": rng.integers(0, 4, (e, 2)).astype(np.int16),
        },
        graph={"y": mols.y.astype(np.float32), "index": mols.index},
    )


def molecules(n: int, seed: int):
    """PyG ``Data``: ``z`` int64, ``pos`` float32, random edges, ``edge_attr``, ``y`` [1, 3]."""
    import torch
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 10))
        m = int(rng.integers(0, 3 * k))
        ei = rng.integers(0, k, (2, m))
        out.append(
            Data(
                z=torch.from_numpy(rng.integers(1, 10, k)),
                pos=torch.from_numpy(rng.uniform(-2, 3, (k, 3))).float(),
                edge_index=torch.from_numpy(ei),
                edge_attr=torch.from_numpy(rng.uniform(0, 1, (m, 2))).float(),
                y=torch.from_numpy(rng.uniform(0, 1, (1, 3))).float(),
            )
        )
    return out


def plain_dicts(n: int, seed: int):
    """Dict graphs without positions: float64 ``x``, int32 edges, ``w`` float16, int ``label``."""
    import torch

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 7))
        m = int(rng.integers(0, 2 * k + 1))
        out.append(
            {
                "x": torch.from_numpy(rng.uniform(0, 1, (k, 4))),
                "edge_index": torch.from_numpy(rng.integers(0, k, (2, m)).astype(np.int32)),
                "w": torch.from_numpy(rng.uniform(0, 1, m).astype(np.float16)),
                "label": torch.tensor([int(rng.integers(0, 5))]),
            }
        )
    return out


def _fits(sizes_n, sizes_e, idx, slack_n, slack_e, slack_g):
    n = int(np.sum(sizes_n[idx]))
    e = int(np.sum(sizes_e[idx]))
    return (n + slack_n, e + slack_e, max(len(idx) + slack_g, 2))


# ------------------------------------------------------------------ cases
SLACKS = ((1, 0, 1), (2, 3, 1), (7, 11, 4), (1, 5, 2))


def torch_cases():
    import graphbatch.torch as gt

    mols = molecules(30, 1)
    nn = np.array([g.num_nodes for g in mols])
    ne = np.array([g.num_edges for g in mols])
    for b, (a, z) in enumerate(((0, 5), (5, 6), (6, 17), (17, 30))):
        idx = np.arange(a, z)
        for s, slack in enumerate(SLACKS):
            shape = _fits(nn, ne, idx, *slack)
            graphs = [mols[i] for i in idx]
            yield f"torch/mol/{b}/{s}", gt.collate(graphs, shape, graph_index=idx + 100)
            yield f"torch/mol-dict/{b}/{s}", gt.collate_dict(graphs, shape)
            if slack[0] > 1:
                yield f"torch/mol-cutoff/{b}/{s}", gt.collate(graphs, shape, cutoff=0.75)
    schema = gt.infer_schema(mols)
    yield "torch/mol-empty", gt.collate([], (4, 3, 3), schema=schema)
    yield (
        "torch/mol-pads",
        gt.collate(
            mols[:4],
            _fits(nn, ne, np.arange(4), 3, 2, 2),
            schema=schema.with_pad(y=float("nan"), z=-1, edge_attr=lambda ctx: ctx.spacing + 0.5),
        ),
    )
    dicts = plain_dicts(20, 2)
    dn = np.array([g["x"].shape[0] for g in dicts])
    de = np.array([g["edge_index"].shape[1] for g in dicts])
    for b, (a, z) in enumerate(((0, 1), (1, 9), (9, 20))):
        idx = np.arange(a, z)
        for s, slack in enumerate(SLACKS):
            yield (
                f"torch/dict/{b}/{s}",
                gt.collate_dict([dicts[i] for i in idx], _fits(dn, de, idx, *slack)),
            )


def store_torch_cases(store):
    import graphbatch.torch as gt

    data = gt.GraphStoreDataset(store)
    nn, ne = store.n_node, store.n_edge
    rng = np.random.default_rng(3)
    batches = [np.arange(0, 4), rng.permutation(len(store))[:9], np.array([7]), np.arange(40, 60)]
    for b, idx in enumerate(batches):
        for s, slack in enumerate(SLACKS):
            shape = _fits(nn, ne, idx, *slack)
            graphs = [data[int(i)] for i in idx]
            yield f"qm9-torch/{b}/{s}", gt.collate(graphs, shape, graph_index=idx)
            yield f"qm9-store/{b}/{s}", gt.store_batch(store, idx, shape)
            yield f"qm9-store-dict/{b}/{s}", gt.store_batch(store, idx, shape, as_dict=True)
            if slack[0] > 1:
                yield (
                    f"qm9-torch-cutoff/{b}/{s}",
                    gt.collate(graphs, shape, graph_index=idx, cutoff=2.0),
                )
                yield f"qm9-store-cutoff/{b}/{s}", gt.store_batch(store, idx, shape, cutoff=2.0)
    yield "qm9-store-empty", gt.store_batch(store, np.zeros(0, np.int64), (3, 2, 4))


def kernel_cases(store):
    from graphbatch._padbatch import pad_batch

    packed = store.packed()
    nn, ne = store.n_node, store.n_edge
    rng = np.random.default_rng(4)
    batches = [np.arange(0, 5), rng.permutation(len(store))[:12], np.zeros(0, np.int64)]
    for b, idx in enumerate(batches):
        for s, slack in enumerate(SLACKS):
            shape = _fits(nn, ne, idx, *slack)
            for layout in ("torch", "jraph"):
                yield f"kernel/{layout}/{b}/{s}", pad_batch(packed, idx, shape, layout=layout)
                yield (
                    f"kernel-opts/{layout}/{b}/{s}",
                    pad_batch(
                        packed,
                        idx,
                        shape,
                        layout=layout,
                        index_dtype=np.int32,
                        dtypes={"z": np.int64, "pos": np.float64, "y": np.float64},
                        pad={"edge_dist": 9.5, "y": -1.0},
                    ),
                )
                if slack[0] > 1:
                    yield (
                        f"kernel-cutoff/{layout}/{b}/{s}",
                        pad_batch(packed, idx, shape, layout=layout, cutoff=1.25),
                    )
                    yield (
                        f"kernel-nopos/{layout}/{b}/{s}",
                        pad_batch(packed, idx, shape, layout=layout, position_key="z"),
                    )


def jax_cases(store):
    import jraph

    from graphbatch.jax import collate
    from graphbatch.jax._source import StoreGraphs

    src = StoreGraphs(store)
    nn, ne = store.n_node, store.n_edge
    rng = np.random.default_rng(5)
    batches = [np.arange(0, 3), rng.permutation(len(store))[:10], np.array([11])]
    for b, idx in enumerate(batches):
        graphs = [src[int(i)] for i in idx]
        for s, slack in enumerate(SLACKS):
            shape = _fits(nn, ne, idx, *slack)
            yield f"jax/qm9/{b}/{s}", collate(graphs, shape, graph_index=idx)
            yield f"jax/qm9-store/{b}/{s}", src.read_batch(idx, shape)
            if slack[0] > 1:
                yield f"jax/qm9-cutoff/{b}/{s}", collate(graphs, shape, cutoff=1.5)
                yield f"jax/qm9-store-cutoff/{b}/{s}", src.read_batch(idx, shape, cutoff=1.5)
    yield "jax/qm9-empty", collate([], (3, 0, 2), template=src[0])
    # array and None feature trees, int64 counts and indices, float64 / int features
    rng = np.random.default_rng(6)
    plain = []
    for _ in range(12):
        k = int(rng.integers(1, 6))
        m = int(rng.integers(0, 2 * k + 1))
        ei = rng.integers(0, k, (2, m))
        plain.append(
            jraph.GraphsTuple(
                n_node=np.array([k], dtype=np.int64),
                n_edge=np.array([m], dtype=np.int64),
                nodes=rng.uniform(0, 1, (k, 2)),
                edges=rng.integers(0, 9, (m,)).astype(np.int8),
                globals=None,
                senders=ei[0],
                receivers=ei[1],
            )
        )
    pn = np.array([int(g.n_node[0]) for g in plain])
    pe = np.array([int(g.n_edge[0]) for g in plain])
    for b, (a, z) in enumerate(((0, 1), (1, 6), (6, 12))):
        idx = np.arange(a, z)
        for s, slack in enumerate(SLACKS):
            yield f"jax/plain/{b}/{s}", collate([plain[i] for i in idx], _fits(pn, pe, idx, *slack))
    nested = [
        g._replace(
            nodes={"h": g.nodes, "more": {"c": g.nodes[:, :1].astype(np.float32)}},
            edges={"e": g.edges},
            globals={"u": np.ones((1, 2), np.float32)},
            n_node=g.n_node.astype(np.int32),
            n_edge=g.n_edge.astype(np.int32),
            senders=g.senders.astype(np.int32),
            receivers=g.receivers.astype(np.int32),
        )
        for g in plain
    ]
    for b, (a, z) in enumerate(((0, 4), (4, 12))):
        idx = np.arange(a, z)
        yield f"jax/nested/{b}", collate([nested[i] for i in idx], _fits(pn, pe, idx, 3, 2, 3))


def make_store(tmp):
    from graphbatch.datasets import GraphStore, write_store

    g = qm9_arrays()
    chunks = [g.take(np.arange(a, min(a + 50, len(g)))) for a in range(0, len(g), 50)]
    return GraphStore(write_store(tmp / "qm9.h5", chunks, name="qm9"))


def cases(tmp):
    """Every ``(name, output)``; ``tmp``: a writable directory (pathlib.Path)."""
    store = make_store(tmp)
    yield from torch_cases()
    yield from store_torch_cases(store)
    yield from kernel_cases(store)
    yield from jax_cases(store)


if __name__ == "__main__":  # print the digests (for tests/core/test_pad_golden.py)
    import json
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        json.dump({name: digest(out) for name, out in cases(Path(d))}, sys.stdout, indent=0)
