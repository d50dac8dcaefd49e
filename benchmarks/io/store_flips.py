"""Single-byte flips over a whole graph store file (issue 14, item 2; issue 26): every flip must
raise `StoreFormatError` on open, on the first read of the graphs (the per-chunk checks, on by
default) or in `verify()`, or leave all content a reader sees unchanged. Issue 26 counted 74
of 645 flips caught only by ``verify()``: a loader would have served their damage.

    python -m benchmarks.io.store_flips [--step 7]

Builds a 4-graph store (~15 KB), flips byte ``k`` for every ``k`` divisible by ``--step`` with
masks 0x01 and 0xFF, and counts outcomes: each flipped copy is opened, all its graphs read
through ``read_batch`` (what the loaders call), then verified; a flip that takes longer than
5 s counts as a hang.
"""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from graphbatch.datasets import (GraphArrays, GraphStore, StoreFormatError, synthetic_graphs,
                                 synthetic_sizes, write_store)

from benchmarks._harness import finish, parser, start


def _content(store):
    p = store.packed()
    out = {"edge_index": np.array(p.edge_index), "n_node": np.array(p.n_node),
           "n_edge": np.array(p.n_edge), "failed": np.array(store.failed_index)}
    for level in ("node", "edge", "graph"):
        out.update({f"{level}/{k}": np.array(v) for k, v in getattr(p, level).items()})
    return (store.name, store.meta, store.fields, store.uuid), out


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--step", type=int, default=7)
    args = ap.parse_args(argv)
    info = start(args)
    sizes = synthetic_sizes(4, "heavy", rng=9, mean_nodes=10)
    g = synthetic_graphs(sizes, rng=10, node_dim=3, n_targets=2)
    rng = np.random.default_rng(11)
    graphs = GraphArrays(n_node=g.n_node, n_edge=g.n_edge, edge_index=g.edge_index,
                         node={**g.node, "z": rng.integers(1, 9, int(g.n_node.sum()))
                               .astype(np.uint8)},
                         edge={"d": rng.random(int(g.n_edge.sum())).astype(np.float32)},
                         graph={**g.graph, "index": np.arange(4)})
    tmp = Path(tempfile.mkdtemp())
    path = write_store(tmp / "s.h5", [graphs], name="flip", meta={"k": [1, 2]},
                       failed_index=[3])
    raw = path.read_bytes()
    with GraphStore(path) as s:
        ref_meta, ref = _content(s)
    bad = tmp / "f.h5"
    out = {"StoreFormatError on open": 0, "StoreFormatError on first read": 0,
           "StoreFormatError in verify only": 0, "unchanged": 0, "silently changed": 0,
           "other exception": 0, "hang (> 5 s)": 0}

    def alarm(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, alarm)
    t0 = time.time()
    for pos in range(0, len(raw), args.step):
        for mask in (0x01, 0xFF):
            flipped = bytearray(raw)
            flipped[pos] ^= mask
            bad.write_bytes(bytes(flipped))
            signal.alarm(5)
            try:
                try:
                    store = GraphStore(bad)
                except StoreFormatError:
                    out["StoreFormatError on open"] += 1
                    continue
                try:
                    n = len(store)
                    store.read_batch(np.arange(n), (int(store.n_node.sum()) + 1,
                                                    int(store.n_edge.sum()), n + 1))
                except StoreFormatError:
                    out["StoreFormatError on first read"] += 1
                    continue
                try:
                    store.verify()
                except StoreFormatError:
                    out["StoreFormatError in verify only"] += 1
                    continue
                meta, got = _content(store)
                same = meta == ref_meta and all(np.array_equal(got[k], ref[k]) for k in ref)
                out["unchanged" if same else "silently changed"] += 1
                if not same:
                    print(f"silent change: byte {pos} ^ {mask:#x}")
            except TimeoutError:
                out["hang (> 5 s)"] += 1
            except Exception as exc:  # noqa: BLE001 - counted and shown
                out["other exception"] += 1
                print(f"byte {pos} ^ {mask:#x}: {type(exc).__name__}: {exc}")
            finally:
                signal.alarm(0)
    print(f"{len(raw):,}-byte store, every {args.step}th byte x masks 0x01, 0xFF "
          f"({sum(out.values()):,} flips, {time.time() - t0:.0f} s):")
    for k, v in out.items():
        print(f"  {k:28s} {v:>6,}")
    finish(args, info, {"store_bytes": len(raw), "step": args.step, "counts": out})


if __name__ == "__main__":
    main()
