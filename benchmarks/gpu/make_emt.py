"""A periodic EMT data set with a heavy-tailed size distribution, as extended XYZ (ase).

FCC Cu/Ag/Au alloys: cubic cells repeated ``i x j x k`` times (each of i, j, k 1 with
probability 0.6, 2: 0.3, 3: 0.08, 4: 0.02: 4 to 256 atoms, most under 32), a few atoms removed,
positions rattled by 0.05 Å; energy and forces from ase's EMT calculator.

    python -m benchmarks.gpu.make_emt OUT.extxyz [--n 3000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np


def make(n: int, seed: int):
    """``n`` EMT-labelled ``ase.Atoms`` (module docstring)."""
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        reps = rng.choice([1, 2, 3, 4], size=3, p=[0.6, 0.3, 0.08, 0.02])
        atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(tuple(int(r) for r in reps))
        atoms.set_chemical_symbols(
            rng.choice(["Cu", "Ag", "Au"], size=len(atoms), p=[0.6, 0.2, 0.2])
        )
        drop = int(rng.integers(0, min(3, len(atoms) - 2)))
        if drop:
            del atoms[rng.choice(len(atoms), size=drop, replace=False).tolist()]
        atoms.positions += rng.normal(0, 0.05, atoms.positions.shape)
        atoms.calc = EMT()
        e, f = atoms.get_potential_energy(), atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=e, forces=f)
        out.append(atoms)
    return out


def main() -> None:
    from ase.io import write

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    frames = make(a.n, a.seed)
    write(a.out, frames, format="extxyz")
    sizes = np.array([len(x) for x in frames])
    print(
        f"wrote {a.out}: {len(frames)} structures, atoms median {np.median(sizes):.0f}, "
        f"p99 {np.percentile(sizes, 99):.0f}, max {sizes.max()}"
    )


if __name__ == "__main__":
    main()
