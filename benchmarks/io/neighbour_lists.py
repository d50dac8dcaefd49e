"""Periodic neighbour lists for atomistic stores: vesin, matscipy (MACE's own) and ASE's
``neighbor_list``, side by side in one run, on small periodic cells, slabs (pbc T T F),
clusters and one-atom primitive cells: edge sets against MACE's ``get_neighborhood`` (as
(i, j, unit shift) rows) and microseconds per structure (median of repeats, one thread).

    python -m benchmarks.io.neighbour_lists [--cutoff 5.0] [--repeats 30]

Prints the CPU, threads and load with the table (results: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks._harness import cpu_model, finish, parser, start  # noqa: E402


def structures(seed: int = 0) -> dict:
    from ase import Atoms
    from ase.build import bulk, fcc111

    rng = np.random.default_rng(seed)

    def rattle(a, s=0.05):
        a = a.copy()
        a.positions += rng.normal(scale=s, size=a.positions.shape)
        return a

    slab = fcc111("Pt", (3, 3, 4), a=3.92, vacuum=8.0)
    slab.pbc = (True, True, False)
    return {
        "fcc primitive (1 atom)": bulk("Cu", "fcc", a=3.61),
        "bcc primitive (1 atom)": bulk("Al", "bcc", a=3.2),
        "hcp (2 atoms)": rattle(bulk("Ni", "hcp", a=2.49, c=4.07)),
        "fcc 8 atoms": rattle(bulk("Cu", "fcc", a=3.61, cubic=True).repeat((1, 1, 2))),
        "fcc 32 atoms": rattle(bulk("Pd", "fcc", a=3.89, cubic=True).repeat(2)),
        "fcc 64 atoms": rattle(bulk("Al", "fcc", a=4.05, cubic=True).repeat((2, 2, 4))),
        "fcc 256 atoms": rattle(bulk("Ni", "fcc", a=3.52, cubic=True).repeat(4)),
        "slab T T F (36 atoms)": rattle(slab),
        "cluster (55 atoms)": Atoms("Au55", positions=rng.normal(0, 3.0, size=(55, 3))),
    }


def rows(i, j, s) -> np.ndarray:
    r = np.concatenate([np.stack([i, j], 1), np.asarray(s)], 1).astype(np.int64)
    return r[np.lexsort(r.T[::-1])]


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--cutoff", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    info = start(args)
    import ase
    import matscipy
    import vesin
    from ase.neighborlist import neighbor_list as ase_nl
    from mace.data.neighborhood import get_neighborhood
    from matscipy.neighbours import neighbour_list as ms_nl

    cut = args.cutoff
    vl = vesin.NeighborList(cutoff=cut, full_list=True, n_threads=1)

    def mace(a):
        ei, _, us, _ = get_neighborhood(a.positions, cut, pbc=tuple(bool(p) for p in a.pbc),
                                        cell=np.array(a.cell))
        return ei[0], ei[1], us

    def run_vesin(a):
        from graphbatch.datasets import neighbour_list

        return neighbour_list(a.positions, np.array(a.cell), a.pbc, cut)

    def run_vesin_raw(a):
        box = np.array(a.cell) if a.pbc.any() else np.zeros((3, 3))
        return vl.compute(a.positions, box, a.pbc, "ijS")

    def run_matscipy(a):
        if not a.pbc.all():  # matscipy needs a full cell: MACE's own wrapper extends it
            return mace(a)
        i, j, s = ms_nl("ijS", a, cut)
        keep = ~((i == j) & (s == 0).all(1))
        return i[keep], j[keep], s[keep]

    def run_ase(a):
        return ase_nl("ijS", a, cut, self_interaction=False)

    libs = {"graphbatch (vesin)": run_vesin, "vesin raw": run_vesin_raw,
            "matscipy": run_matscipy, "ase": run_ase}
    model = cpu_model()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} | {model} | load {os.getloadavg()} | cutoff "
          f"{cut} Å | one thread | ase {ase.__version__}, matscipy {matscipy.__version__}, "
          f"vesin {vesin.__version__}")
    print(f"{'structure':26s} {'edges':>6s} " + " ".join(f"{k:>20s}" for k in libs))
    results = []
    for name, a in structures().items():
        ref = rows(*mace(a))
        cells = []
        for lib, fn in libs.items():
            same = np.array_equal(rows(*fn(a)), ref)
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn(a)
                times.append(time.perf_counter() - t)
            cells.append(f"{'=' if same else 'DIFF'} {1e6 * float(np.median(times)):8.0f} us")
        print(f"{name:26s} {ref.shape[0]:6d} " + " ".join(f"{c:>20s}" for c in cells))
        results.append({"structure": name, "edges": int(ref.shape[0]), **dict(zip(libs, cells))})
    print("('=': the same (i, j, unit shift) multiset as MACE's get_neighborhood; matscipy "
          "rows for non-periodic cases are MACE's own call)")
    finish(args, info, results)


if __name__ == "__main__":
    main()
