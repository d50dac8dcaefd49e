"""``graphbatch data stats``: what MACE computes before training (E0s, ``avg_num_neighbors``,
the z table, energy and force statistics), from an atomistic store."""

from __future__ import annotations

from typing import Any

from ._format import format_table, print_json

__all__ = ["add_parser"]


def add_parser(dsub: Any) -> None:
    """Register ``stats`` under ``graphbatch data``."""
    p = dsub.add_parser(
        "stats",
        help="MACE's statistics of an atomistic store: E0s, avg_num_neighbors, z table",
        description="Compute, streaming over the store in chunks, what MACE computes before "
        "training: per-element E0s by least squares (compute_average_E0s), avg_num_neighbors "
        "(compute_avg_num_neighbors), the z table, the mean/std of (E - sum E0) / n_atoms, "
        "the force RMS, and energy/force means. Per head too when the store has several.",
    )
    p.add_argument("store", help="atomistic graph store (.h5) or sharded store manifest (.json)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (keys: atomic_energies {Z: eV}, avg_num_neighbors, "
        "z_table, n_graph, n_node, n_edge, n_energy, energy_mean, energy_rms, "
        "energy_per_atom_mean, energy_per_atom_std, n_forces, forces_rms, forces_mean, "
        "atoms_per_element, heads)",
    )
    p.set_defaults(func=run_stats)


def _symbol(z: int) -> str:
    try:
        from ase.data import chemical_symbols
    except ImportError:  # pragma: no cover - ase comes with the atomistic extra
        return ""
    return chemical_symbols[z] if 0 <= z < len(chemical_symbols) else ""


def _number(v: float | None, digits: int = 6) -> str:
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def run_stats(args: Any) -> int:
    from ..datasets import atoms_statistics

    stats = atoms_statistics(args.store)
    if args.json:
        print_json(stats.as_dict())
        return 0
    print(
        f"{args.store}: {stats.n_graph:,} structures, {stats.n_node:,} atoms, "
        f"{stats.n_edge:,} edges"
    )
    print(f"avg_num_neighbors     {_number(stats.avg_num_neighbors)}")
    print(
        f"energy (eV)           mean {_number(stats.energy_mean)}, "
        f"rms {_number(stats.energy_rms)} ({stats.n_energy:,} structures)"
    )
    print(
        f"energy per atom (eV)  mean {_number(stats.energy_per_atom_mean)}, "
        f"std {_number(stats.energy_per_atom_std)}  ((E - sum E0) / atoms)"
    )
    if stats.forces_rms is None:
        print("forces (eV/Å)         not in the store")
    else:
        print(f"forces (eV/Å)         rms {_number(stats.forces_rms)} ({stats.n_forces:,} atoms)")
    rows = []
    for z in stats.z_table:
        row: dict[str, Any] = {
            "Z": z,
            "element": _symbol(z),
            "atoms": stats.atoms_per_element[z],
            "E0 (eV)": _number(stats.atomic_energies[z]),
        }
        for head, h in stats.heads.items():
            row[f"E0 {head}"] = _number(h.atomic_energies.get(z))
        rows.append(row)
    print()
    print(format_table(rows))
    return 0
