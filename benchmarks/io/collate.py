"""Collation speed: graphbatch.torch.collate vs PyG's ways to batch, side by side in one run.

QM9-sized synthetic molecules (node/edge counts drawn from the shipped QM9 radius-6 Å size table;
fields shaped like PyG's QM9: x [n, 11], z [n], pos [n, 3], edge_index [2, E], edge_attr [E, 4],
y [1, 19]). For each batch size, one epoch of a ``dynamic`` plan is collated by:

- ``graphbatch``: ``graphbatch.torch.collate`` to the plan's padded shape (with masks);
- ``pyg+pad``: the PyG way to the same fixed shape -- ``Batch.from_data_list`` of the real graphs
  plus a padding graph (all padding nodes/edges) and empty graphs, then the masks;
- ``pyg Pad``: PyG's ``Pad`` transform on each graph (to the largest graph) then
  ``Batch.from_data_list`` -- PyG's per-graph fixed shape (a larger shape than the plan's);
- ``from_data_list``: ``Batch.from_data_list`` alone, which pads nothing.

Then DataLoader throughput over one epoch (graphbatch.torch.loader and PyG's DataLoader) with 0
and 2 workers.

    python -m benchmarks.io.collate [--quick]
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader as PygLoader
from torch_geometric.transforms import Pad

import graphbatch as gb
import graphbatch.torch as gt

from benchmarks._harness import describe, finish, parser, qm9_like_sizes, start


def make_molecules(sizes: gb.GraphSizes, seed: int) -> list[Data]:
    rng = np.random.default_rng(seed)
    out = []
    for n, e in zip(sizes.n_node.tolist(), sizes.n_edge.tolist()):
        out.append(Data(
            x=torch.from_numpy(rng.normal(size=(n, 11)).astype(np.float32)),
            z=torch.from_numpy(rng.integers(1, 10, size=n)),
            pos=torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32)),
            edge_index=torch.from_numpy(rng.integers(0, n, size=(2, e))),
            edge_attr=torch.from_numpy(rng.normal(size=(e, 4)).astype(np.float32)),
            y=torch.from_numpy(rng.normal(size=(1, 19)).astype(np.float32)),
        ))
    return out


def pyg_pad_with_graphs(graphs: list[Data], shape) -> Batch:
    """PyG to a fixed shape: append a padding graph and empty graphs, from_data_list, masks."""
    n_node, n_edge, n_graph = shape
    nr = sum(g.num_nodes for g in graphs)
    er = sum(g.num_edges for g in graphs)
    g0 = graphs[0]

    def filler(n: int, e: int) -> Data:
        return Data(
            x=g0.x.new_zeros(n, 11), z=g0.z.new_zeros(n), pos=g0.pos.new_zeros(n, 3),
            edge_index=g0.edge_index.new_zeros(2, e), edge_attr=g0.edge_attr.new_zeros(e, 4),
            y=g0.y.new_zeros(1, 19), num_nodes=n,
        )

    pads = [filler(n_node - nr, n_edge - er)] + [filler(0, 0)] * (n_graph - len(graphs) - 1)
    b = Batch.from_data_list(graphs + pads)
    b.node_mask = torch.arange(n_node) < nr
    b.edge_mask = torch.arange(n_edge) < er
    b.graph_mask = torch.arange(n_graph) < len(graphs)
    return b


def time_epochs(fns: dict, groups, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` seconds for one pass of each ``fns[name]`` over ``groups``.

    Passes are interleaved (every method once per round), so load changes on a shared machine
    hit all methods alike instead of whichever ran during the spike.
    """
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for item in groups:
                fn(item)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def collate_table(graphs, sizes, batch_sizes, n_batches, repeat) -> list[list[str]]:
    rows = []
    schema = gt.infer_schema(graphs[:64])
    max_n, max_e = int(sizes.n_node.max()), int(sizes.n_edge.max())
    pad_t = Pad(max_num_nodes=max_n, max_num_edges=max_e)
    for bs in batch_sizes:
        plan = gb.plan(sizes, "dynamic", batch_size=bs, seed=0)
        groups = []
        for b in range(min(n_batches, len(plan))):
            idx = plan.batch(b).tolist()
            groups.append(([graphs[i] for i in idx], plan.shape(b), idx))
        real = sum(len(g[0]) for g in groups)
        t = time_epochs({
            "graphbatch": lambda it: gt.collate(it[0], it[1], graph_index=it[2], schema=schema),
            "pyg+pad": lambda it: pyg_pad_with_graphs(it[0], it[1]),
            "pyg Pad": lambda it: Batch.from_data_list([pad_t(g) for g in it[0]]),
            "from_data_list": lambda it: Batch.from_data_list(it[0]),
        }, groups, repeat)
        gps = {k: real / v for k, v in t.items()}
        rows.append([
            str(bs), str(len(groups)), f"{gps['graphbatch']:,.0f}", f"{gps['pyg+pad']:,.0f}",
            f"{gps['pyg Pad']:,.0f}", f"{gps['from_data_list']:,.0f}",
            f"{gps['graphbatch'] / gps['pyg+pad']:.2f}x",
            f"{gps['graphbatch'] / gps['pyg Pad']:.2f}x",
            f"{gps['graphbatch'] / gps['from_data_list']:.2f}x",
        ])
    return rows


def loader_table(graphs, sizes, batch_size, workers) -> list[list[str]]:
    rows = []
    for nw in workers:
        ld = gt.loader(graphs, strategy="dynamic", sizes=sizes, batch_size=batch_size, seed=0,
                       dataloader_kwargs={"num_workers": nw})
        pyg = PygLoader(graphs, batch_size=batch_size - 1, shuffle=True, num_workers=nw)
        res = []
        for it in (ld, pyg):
            t0 = time.perf_counter()
            n = 0
            for b in it:
                n += b.num_graphs if it is pyg else int(b.graph_mask.sum())
            res.append(n / (time.perf_counter() - t0))
        rows.append([str(nw), f"{res[0]:,.0f}", f"{res[1]:,.0f}", f"{res[0] / res[1]:.2f}x"])
    return rows


def fmt(header, rows) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def main(argv=None) -> None:
    ap = parser(__doc__, threads=1, threads_help="torch threads (default: 1)")
    ap.add_argument("--quick", action="store_true", help="fewer graphs and repeats")
    ap.add_argument("--graphs", type=int, default=None)
    args = ap.parse_args(argv)
    info = start(args)
    n = args.graphs or (3000 if args.quick else 20000)
    repeat = 2 if args.quick else 5
    n_batches = 20 if args.quick else 60
    torch.set_num_threads(args.threads)
    sizes, source = qm9_like_sizes(n, seed=0)
    graphs = make_molecules(sizes, seed=0)
    print(f"# {source}: {describe(sizes)}; torch threads = {args.threads}")
    print("\nCollation, graphs/s (best of", repeat, "interleaved passes over", n_batches,
          "dynamic-plan batches)")
    head = ["batch_size", "batches", "graphbatch", "pyg+pad", "pyg Pad", "from_data_list",
            "vs pyg+pad", "vs pyg Pad", "vs from_data_list"]
    rows = collate_table(graphs, sizes, (32, 128), n_batches, repeat)
    print(fmt(head, rows))
    results = {"collation": [dict(zip(head, r)) for r in rows]}
    for bs in (32, 128):
        print(f"\nDataLoader, one epoch, graphs/s, batch_size={bs} (PyG: {bs - 1} graphs, unpadded)")
        head = ["workers", "graphbatch.loader", "PyG DataLoader", "ratio"]
        rows = loader_table(graphs, sizes, bs, (0, 2))
        print(fmt(head, rows))
        results[f"loader_bs{bs}"] = [dict(zip(head, r)) for r in rows]
    finish(args, info, results)


if __name__ == "__main__":
    main()
