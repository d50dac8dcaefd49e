"""A labelled periodic dataset made offline: ASE's EMT calculator on generated structures.

`emt_structures` makes rattled and strained FCC/BCC/HCP supercells of Cu, Al, Ni, Pd, Ag, Au
and Pt and their random alloys (one-atom primitive cells included), FCC slabs (pbc ``T T F``)
and clusters (no cell), from 1 to ``max_atoms`` atoms with a heavy tail (log-normal atom
counts), and labels each with EMT's energy (eV), forces (eV/Å) and, for periodic cells, stress
(eV/Å^3, ASE's sign and Voigt order ``xx yy zz yz xz xy``). `write_emt_extxyz` writes them to
an extxyz file with MACE's keys (``REF_energy``, ``REF_forces``, ``REF_stress``,
``config_type``). Structure ``i`` depends only on ``(seed, i)``: the same file for any number
of worker processes. EMT is a toy potential (good enough to give realistic labels' shapes and
magnitudes, not physics); ASE is needed (``pip install 'graphbatch[atomistic]'``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import numpy as np

from .._errors import InputError

if TYPE_CHECKING:
    from ase import Atoms

T = TypeVar("T")

__all__ = ["EMT_ELEMENTS", "EMT_KINDS", "emt_structures", "write_emt_extxyz"]

#: EMT's metals and their FCC lattice constants (Å, ASE's reference states).
EMT_ELEMENTS = {"Cu": 3.61, "Al": 4.05, "Ni": 3.52, "Pd": 3.89, "Ag": 4.09, "Au": 4.08, "Pt": 3.92}
#: Structure kinds and their default shares.
EMT_KINDS = {"bulk": 0.7, "slab": 0.15, "cluster": 0.15}


def _atom_count(rng: np.random.Generator, max_atoms: int) -> int:
    """A heavy-tailed atom count in ``1..max_atoms`` (log-normal, median 16)."""
    return int(np.clip(np.round(np.exp(rng.normal(np.log(16.0), 1.0))), 1, max_atoms))


def _repeats(rng: np.random.Generator, target: int, per_cell: int, dims: int) -> tuple:
    """``dims`` repetitions whose product times ``per_cell`` is near ``target``."""
    cells = max(1, target // per_cell)
    base = cells ** (1.0 / dims)
    reps = [max(1, int(round(base * np.exp(rng.normal(0.0, 0.15))))) for _ in range(dims)]
    while int(np.prod(reps)) * per_cell > max(target, per_cell) and max(reps) > 1:
        reps[int(np.argmax(reps))] -= 1
    return tuple(reps)


def _species(rng: np.random.Generator, n: int) -> np.ndarray:
    """Atomic symbols of ``n`` atoms: one metal (60%) or a random alloy of two or three."""
    names = list(EMT_ELEMENTS)
    if rng.random() < 0.6:
        return np.array([names[rng.integers(len(names))]] * n)
    k = int(rng.integers(2, 4))
    pick = rng.choice(len(names), size=k, replace=False)
    return np.array([names[i] for i in rng.choice(pick, size=n)])


def _lattice(symbols: np.ndarray) -> float:
    """Vegard's-law FCC lattice constant of a composition (Å)."""
    return float(np.mean([EMT_ELEMENTS[s] for s in symbols]))


def _bulk(rng: np.random.Generator, max_atoms: int) -> tuple[Atoms, str]:
    from ase.build import bulk

    target = _atom_count(rng, max_atoms)
    lattice = str(rng.choice(["fcc", "fcc", "bcc", "hcp"]))
    primitive = target <= 2 and rng.random() < 0.7
    base_symbol = "Cu"
    if lattice == "fcc":
        proto = bulk(base_symbol, "fcc", a=1.0, cubic=not primitive)
    elif lattice == "bcc":
        proto = bulk(base_symbol, "bcc", a=1.0, cubic=not primitive)
    else:
        proto = bulk(base_symbol, "hcp", a=1.0 / np.sqrt(2.0), c=np.sqrt(4.0 / 3.0))
    atoms = proto.repeat(_repeats(rng, target, len(proto), 3))
    atoms.set_chemical_symbols(_species(rng, len(atoms)))
    a = _lattice(atoms.get_chemical_symbols())
    if lattice == "bcc":
        a /= 2.0 ** (1.0 / 3.0)  # BCC with FCC's volume per atom
    atoms.set_cell(atoms.cell * a, scale_atoms=True)
    strain = rng.normal(0.0, 0.02, size=(3, 3))
    strain = 0.5 * (strain + strain.T)
    atoms.set_cell(atoms.cell @ (np.eye(3) + strain), scale_atoms=True)
    atoms.positions += rng.normal(0.0, rng.uniform(0.01, 0.1), size=atoms.positions.shape)
    return atoms, f"bulk_{lattice}"


def _slab(rng: np.random.Generator, max_atoms: int) -> tuple[Atoms, str]:
    from ase.build import fcc100, fcc110, fcc111

    target = max(4, _atom_count(rng, max_atoms))
    layers = int(rng.integers(2, 6))
    side = max(1, int(round(np.sqrt(target / layers))))
    make = [fcc111, fcc100, fcc110][int(rng.integers(3))]
    symbols = _species(rng, side * side * layers)  # one atom per surface cell and layer
    atoms = make(
        "Cu", size=(side, side, layers), a=_lattice(symbols), vacuum=float(rng.uniform(5.0, 10.0))
    )
    atoms.info.clear()
    atoms.set_chemical_symbols(symbols)
    atoms.pbc = (True, True, False)
    atoms.positions += rng.normal(0.0, rng.uniform(0.01, 0.08), size=atoms.positions.shape)
    return atoms, f"slab_{make.__name__}"


def _cluster(rng: np.random.Generator, max_atoms: int) -> tuple[Atoms, str]:
    from ase import Atoms
    from ase.build import bulk

    target = _atom_count(rng, max_atoms)
    proto = bulk("Cu", "fcc", a=1.0, cubic=True)
    reps = max(1, int(np.ceil((target / 4) ** (1 / 3))) + 1)
    block = proto.repeat(reps)
    centre = block.positions.mean(axis=0) + rng.normal(0.0, 0.1, size=3)
    order = np.argsort(np.linalg.norm(block.positions - centre, axis=1), kind="stable")
    keep = order[:target]
    atoms = Atoms("Cu" * len(keep), positions=block.positions[keep], pbc=False)
    atoms.set_chemical_symbols(_species(rng, len(atoms)))
    a = _lattice(atoms.get_chemical_symbols())
    atoms.positions *= a * (1.0 + rng.normal(0.0, 0.02))
    atoms.positions += rng.normal(0.0, rng.uniform(0.01, 0.1), size=atoms.positions.shape)
    atoms.positions -= atoms.positions.min(axis=0) - 5.0
    return atoms, "cluster"


def emt_structures(
    n: int,
    *,
    seed: int = 0,
    start: int = 0,
    max_atoms: int = 400,
    kinds: dict[str, float] | None = None,
) -> Iterator:
    """Structures ``start .. start + n - 1`` as ``ase.Atoms`` labelled by EMT: ``info``
    ``REF_energy`` (eV), ``REF_stress`` (eV/Å^3, Voigt; periodic cells only), ``config_type``;
    ``arrays`` ``REF_forces`` (eV/Å). ``kinds``: shares of ``bulk``/``slab``/``cluster``
    (default `EMT_KINDS`); ``max_atoms``: the largest structure."""
    from ase.calculators.emt import EMT

    if int(n) < 0 or int(max_atoms) < 1:
        raise InputError(f"need n >= 0 and max_atoms >= 1, got n={n}, max_atoms={max_atoms}")
    shares = dict(EMT_KINDS if kinds is None else kinds)
    unknown = set(shares) - set(EMT_KINDS)
    if unknown or not shares or min(shares.values()) < 0 or sum(shares.values()) <= 0:
        raise InputError(f"kinds must weigh some of {sorted(EMT_KINDS)} (>= 0), got {shares}")
    names = list(shares)
    p = np.array([shares[k] for k in names], dtype=float)
    p /= p.sum()
    makers = {"bulk": _bulk, "slab": _slab, "cluster": _cluster}
    calc = EMT()
    for i in range(int(start), int(start) + int(n)):
        rng = np.random.default_rng([int(seed), i])
        kind = names[int(rng.choice(len(names), p=p))]
        atoms, config_type = makers[kind](rng, int(max_atoms))
        atoms.calc = calc
        energy = float(atoms.get_potential_energy())
        forces = np.array(atoms.get_forces())
        stress = np.array(atoms.get_stress()) if atoms.pbc.all() else None
        atoms.calc = None
        atoms.info["REF_energy"] = energy
        if stress is not None:
            atoms.info["REF_stress"] = stress
        atoms.info["config_type"] = config_type
        atoms.arrays["REF_forces"] = forces
        yield atoms


def _write_part(args: tuple[str, int, int, int, int, dict[str, float] | None]) -> str:
    import ase.io

    path, n, seed, start, max_atoms, kinds = args
    with open(path, "w") as fh:
        for atoms in emt_structures(n, seed=seed, start=start, max_atoms=max_atoms, kinds=kinds):
            ase.io.write(fh, atoms, format="extxyz")
    return path


def write_emt_extxyz(
    path: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    max_atoms: int = 400,
    kinds: dict[str, float] | None = None,
    workers: int = 1,
    progress: bool = False,
) -> Path:
    """Write `emt_structures` ``0 .. n-1`` to the extxyz file ``path`` (atomically:
    `graphbatch._io.atomic_write`), computed by ``workers`` processes in blocks of 2,000
    structures (each written to a part file in a temporary folder next to ``path``); returns
    the path. The file is the same for any ``workers``."""
    import tempfile

    from .._io import atomic_write

    path = Path(path)
    n, workers = int(n), max(1, int(workers))
    block = 2000
    starts = list(range(0, n, block))
    directory = path.parent if str(path.parent) else Path(".")
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=directory) as tmp:
        parts = [str(Path(tmp) / f"{k}.xyz") for k in range(len(starts))]
        jobs = [
            (parts[k], min(block, n - s), seed, s, max_atoms, kinds) for k, s in enumerate(starts)
        ]
        if workers > 1 and len(jobs) > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(workers) as pool:
                list(_progress(pool.map(_write_part, jobs), len(jobs), progress))
        else:
            list(_progress(map(_write_part, jobs), len(jobs), progress))

        def concatenate(out: IO[bytes]) -> None:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(1 << 24):
                        out.write(chunk)

        atomic_write(path, concatenate)
    return path


def _progress(it: Iterable[T], total: int, on: bool) -> Iterable[T]:
    if not on:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, unit="block", desc="EMT structures")
