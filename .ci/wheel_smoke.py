"""Import, plan and collate from an installed graphbatch wheel (run by .ci/wheel_smoke.sh with
the fresh environment's interpreter, outside the checkout).

Checks that the package comes from site-packages (not src/), ships ``py.typed`` and its size
table, plans the shipped QM9 table with a fixed-shape strategy, and collates real PyG graphs to
the plan's padded shapes through ``graphbatch.torch.loader``: every graph exactly once, every
batch of the one planned shape.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import graphbatch as gb

root = Path(gb.__file__).resolve().parent
if "site-packages" not in root.parts:
    sys.exit(f"wheel_smoke: graphbatch imported from {root}, not from an installed wheel")
for name in ("py.typed", "data/qm9_radius6_sizes.npz"):
    if not resources.files("graphbatch").joinpath(name).is_file():
        sys.exit(f"wheel_smoke: the installed package lacks {name}")

import torch  # noqa: E402  (after the checks above: they need no torch)
from torch_geometric.data import Data  # noqa: E402

import graphbatch.torch as gt  # noqa: E402
from graphbatch.demo import default_sizes  # noqa: E402


def check(ok: bool, what: str) -> None:
    if not ok:
        sys.exit(f"wheel_smoke: {what}")


sizes, source = default_sizes()
if "shipped" not in source:
    sys.exit(f"wheel_smoke: default_sizes() gave {source!r}, not the shipped table")
plan = gb.plan(sizes, "dynamic", batch_size=32, seed=0)
stats = plan.stats()
check(sorted(plan.order.tolist()) == list(range(len(sizes))), "a planned graph missing or twice")
check(stats.distinct_shapes == 1, f"dynamic planned {stats.distinct_shapes} shapes")
print(
    f"planned {len(sizes):,} QM9 graphs into {len(plan):,} batches of one shape "
    f"{tuple(int(s) for s in plan.shape(0))}"
)

gen = torch.Generator().manual_seed(0)
graphs = []
for _ in range(50):
    n = int(torch.randint(2, 9, (1,), generator=gen))
    src, dst = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = src != dst
    graphs.append(
        Data(
            z=torch.randint(1, 10, (n,), generator=gen),
            pos=torch.randn(n, 3, generator=gen),
            edge_index=torch.stack([src[keep], dst[keep]]),
            y=torch.randn(1, 1, generator=gen),
        )
    )
loader = gt.loader(graphs, strategy="pack-lpf", batch_size=8, seed=1)
seen, shapes = [], set()
for batch in loader:
    seen += batch.graph_index[batch.graph_mask].tolist()
    shapes.add((batch.num_nodes, batch.edge_index.shape[1], batch.graph_mask.shape[0]))
check(sorted(seen) == list(range(len(graphs))), "a collated graph missing or twice")
check(len(shapes) == 1, f"pack-lpf batches have {len(shapes)} shapes: {shapes}")
print(
    f"collated {len(graphs)} PyG graphs into {len(loader)} padded batches of shape {shapes.pop()}"
)
