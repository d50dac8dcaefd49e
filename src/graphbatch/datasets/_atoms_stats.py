"""What MACE computes before training, from an atomistic store: `atoms_statistics`.

Read in chunks of consecutive structures (``chunk_rows`` atoms + edges + 128 per structure at
a time, through `GraphStore.arrays`, so every chunk is CRC-checked; shards of a sharded store
one after another): a 1M-structure store is never in memory. Two passes: the first
accumulates counts, sums and the least-squares factor for the E0s
(`graphbatch.datasets._stream_stats`), the second the per-atom interaction energies, which need
the E0s, from the atomic numbers and energies alone.

Definitions (mace-torch 0.3; equal to MACE's functions to 1e-8 relative,
``tests/atomistic/test_atoms_stats_mace.py``):

- ``atomic_energies``: ``mace.data.utils.compute_average_E0s``: ``np.linalg.lstsq`` of the
  energies on the per-structure element counts (minimum-norm where the counts are rank
  deficient; zeros for all if it fails, as MACE).
- ``avg_num_neighbors``: ``mace.modules.utils.compute_avg_num_neighbors``: edges / atoms that
  receive at least one edge.
- ``energy_per_atom_mean``/``_std``: ``compute_mean_std_atomic_inter_energy``: mean and
  (unbiased, ``+1e-6``) standard deviation over structures of ``(E - sum E0) / n_atoms``;
  ``forces_rms``: ``compute_mean_rms_energy_forces``: ``sqrt(mean F^2)`` over atoms and
  components. MACE's ``std_scaling`` uses the first pair as ``atomic_inter_shift``/``_scale``,
  its default ``rms_forces_scaling`` the mean and ``forces_rms``. A zero std/rms is 1, as MACE.
- ``energy_mean``/``energy_rms``: of the total energies (eV); ``forces_mean``: per component.

Which structures count: all, as in MACE, where every frame had the property (the store's
``meta["frames_with"]``); where some frames lacked it (stored as 0 with weight 0), the
structures whose ``<property>_weight`` is 0 are left out (MACE's E0 fit fails on them).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._validate import as_positive_int
from ._graphs import GraphArrays
from ._shards import ShardedGraphStore
from ._store import GraphStore
from ._store_open import AnyStore, open_store
from ._stream_stats import Moments, StreamingLeastSquares

__all__ = ["AtomsStatistics", "atoms_statistics"]

#: Default chunk: about 4M rows (atoms + edges + 128 per structure) read at a time.
CHUNK_ROWS = 1 << 22
_PER_GRAPH = 128


@dataclass(frozen=True)
class AtomsStatistics:
    """Statistics of an atomistic store's structures as MACE computes them before training
    (module docstring: `graphbatch.datasets._atoms_stats`). Energies in eV, forces in eV/Å
    (the store's units). ``heads``: the same per head when the store has more than one (each
    head's E0s on its own structures and elements, as MACE fits them per head)."""

    n_graph: int
    n_node: int
    n_edge: int
    z_table: tuple[int, ...]
    atoms_per_element: Mapping[int, int]
    atomic_energies: Mapping[int, float]
    avg_num_neighbors: float
    n_energy: int
    energy_mean: float
    energy_rms: float
    energy_per_atom_mean: float
    energy_per_atom_std: float
    n_forces: int
    forces_mean: tuple[float, float, float] | None
    forces_rms: float | None
    heads: Mapping[str, AtomsStatistics] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("atoms_per_element", "atomic_energies", "heads"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``atomic_energies`` ``{Z: eV}``, ``avg_num_neighbors``, ``z_table``
        first, then the rest; NaN (nothing to average) as ``None``."""
        out: dict[str, Any] = {
            "atomic_energies": {int(z): float(e) for z, e in self.atomic_energies.items()},
            "avg_num_neighbors": _finite_or_none(self.avg_num_neighbors),
            "z_table": list(self.z_table),
        }
        for name in (
            "n_graph",
            "n_node",
            "n_edge",
            "n_energy",
            "energy_mean",
            "energy_rms",
            "energy_per_atom_mean",
            "energy_per_atom_std",
            "n_forces",
            "forces_rms",
        ):
            out[name] = _finite_or_none(getattr(self, name))
        out["forces_mean"] = None if self.forces_mean is None else list(self.forces_mean)
        out["atoms_per_element"] = {int(z): int(c) for z, c in self.atoms_per_element.items()}
        out["heads"] = {h: s.as_dict() for h, s in self.heads.items()}
        return out

    def to_json(self) -> str:
        """`as_dict` as a JSON string (element keys become strings, as JSON requires)."""
        return json.dumps(self.as_dict())


def _vector(v: np.ndarray) -> tuple[float, float, float]:
    return (float(v[0]), float(v[1]), float(v[2]))


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


# ====================================================================== accumulation
class _Group:
    """Accumulators of one set of structures (the whole store, or one head)."""

    def __init__(self) -> None:
        self.n_graph = self.n_node = self.n_edge = self.receivers = 0
        self.atoms = np.zeros(256, dtype=np.int64)
        self.fit = StreamingLeastSquares()
        self.n_energy = 0
        self.e_sum = self.e_sq = 0.0
        self.n_forces = 0
        self.f_sum = np.zeros(3)
        self.f_sq = 0.0
        self.per_atom = Moments()
        self.e0 = np.zeros(0)

    def add(self, c: _Chunk, mask: np.ndarray | None) -> None:
        """Pass 1: the chunk's structures ``mask`` (all where None)."""

        def pick(a: np.ndarray) -> np.ndarray:
            return a if mask is None else a[mask]

        self.n_graph += int(pick(c.n_node).shape[0])
        self.n_node += int(pick(c.n_node).sum())
        self.n_edge += int(pick(c.n_edge).sum())
        self.receivers += int(pick(c.receivers).sum())
        counts = pick(c.counts)
        self.atoms[c.zs] += counts.sum(axis=0)
        has_e = pick(c.has_energy)
        energy = pick(c.energy)[has_e]
        self.fit.widen(c.zs)
        self.fit.add(counts[has_e].astype(np.float64), energy)
        self.n_energy += int(energy.shape[0])
        self.e_sum += float(energy.sum())
        self.e_sq += float(np.square(energy).sum())
        if c.forces is not None:
            f_sum, f_sq, has_forces = c.forces
            has_f = pick(has_forces)
            self.n_forces += int(pick(c.n_node)[has_f].sum())
            self.f_sum += pick(f_sum)[has_f].sum(axis=0)
            self.f_sq += float(pick(f_sq)[has_f].sum())

    def solve(self, all_zs: np.ndarray) -> None:
        """The E0s over this group's elements (zero elsewhere in ``all_zs``), as MACE's
        ``compute_average_E0s`` with the table of these elements."""
        self.fit.widen(all_zs)
        self.e0 = np.zeros(all_zs.shape[0])
        own = self.zs()
        if self.fit.rows == 0 or own.shape[0] == 0:
            return
        try:
            self.e0[np.searchsorted(all_zs, own)] = self.fit.solve(own)
        except np.linalg.LinAlgError:  # MACE: "using the same for all atoms" (zeros)
            warnings.warn(
                "the least-squares fit of the E0s failed; they are 0 (as in MACE)",
                RuntimeWarning,
                stacklevel=3,
            )

    def zs(self) -> np.ndarray:
        return np.flatnonzero(self.atoms).astype(np.int64)

    def add_per_atom(self, counts: np.ndarray, energy: np.ndarray, n_node: np.ndarray) -> None:
        """Pass 2: ``(E - counts @ E0) / n`` of structures with an energy."""
        self.per_atom.add((energy - counts @ self.e0) / n_node)

    def result(self, has_forces: bool, heads: Mapping[str, AtomsStatistics]) -> AtomsStatistics:
        own = self.zs()
        n_e, n_f = self.n_energy, self.n_forces
        nan = float("nan")
        rms = float(np.sqrt(self.f_sq / (3 * n_f))) if n_f else nan
        e0 = dict(zip(self.fit.zs.tolist(), self.e0.tolist(), strict=True))
        return AtomsStatistics(
            n_graph=self.n_graph,
            n_node=self.n_node,
            n_edge=self.n_edge,
            z_table=tuple(int(z) for z in own),
            atoms_per_element={int(z): int(self.atoms[z]) for z in own},
            atomic_energies={int(z): float(e0[int(z)]) for z in own},
            avg_num_neighbors=self.n_edge / self.receivers if self.receivers else nan,
            n_energy=n_e,
            energy_mean=self.e_sum / n_e if n_e else nan,
            energy_rms=float(np.sqrt(self.e_sq / n_e)) if n_e else nan,
            energy_per_atom_mean=self.per_atom.mean if n_e else nan,
            energy_per_atom_std=self.per_atom.mace_std() if n_e else nan,
            n_forces=n_f,
            forces_mean=_vector(self.f_sum / n_f) if has_forces and n_f else None,
            forces_rms=(1.0 if rms == 0 else rms) if has_forces else None,
            heads=heads,
        )


@dataclass
class _Chunk:
    """Per-structure quantities of one chunk; ``counts[g, k]``: atoms of element ``zs[k]``;
    ``forces``: per structure the sum of the forces ``[G, 3]``, of their squares ``[G]``, and
    whether they count (None: the store has no forces)."""

    n_node: np.ndarray
    n_edge: np.ndarray
    receivers: np.ndarray
    zs: np.ndarray
    counts: np.ndarray
    energy: np.ndarray
    has_energy: np.ndarray
    head: np.ndarray
    forces: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _chunk(g: GraphArrays, zs: np.ndarray, complete: Mapping[str, bool]) -> _Chunk:
    """Pass-1 quantities of the structures in ``g`` (columns of ``counts``: ``zs``)."""
    n_node, n_edge = g.n_node.astype(np.int64), g.n_edge.astype(np.int64)
    n_graph, n_atoms = n_node.shape[0], int(n_node.sum())
    gid = np.repeat(np.arange(n_graph), n_node)
    first = np.cumsum(n_node) - n_node
    receiver = g.edge_index[1].astype(np.int64) + np.repeat(first, n_edge)
    receiving = np.bincount(receiver, minlength=n_atoms) > 0
    c = _Chunk(
        n_node=n_node,
        n_edge=n_edge,
        receivers=np.bincount(gid[receiving], minlength=n_graph),
        zs=zs,
        counts=_counts(g.node["atomic_numbers"], gid, n_graph, zs),
        energy=np.asarray(g.graph["energy"], dtype=np.float64),
        has_energy=_present(g.graph, "energy", complete),
        head=_heads(g.graph, n_graph),
    )
    if "forces" in g.node:
        f = np.asarray(g.node["forces"], dtype=np.float64).reshape(n_atoms, 3)
        c.forces = (
            np.stack(
                [np.bincount(gid, weights=f[:, k], minlength=n_graph) for k in range(3)], axis=1
            ),
            np.bincount(gid, weights=np.square(f).sum(axis=1), minlength=n_graph),
            _present(g.graph, "forces", complete),
        )
    return c


def _counts(z: np.ndarray, gid: np.ndarray, n_graph: int, zs: np.ndarray) -> np.ndarray:
    """``[G, len(zs)]``: atoms of each element per structure (MACE's least-squares matrix)."""
    k = zs.shape[0]
    column = np.zeros(256, dtype=np.int64)
    column[zs] = np.arange(k)
    flat = gid * k + column[z]
    return np.bincount(flat, minlength=n_graph * k).reshape(n_graph, k)


def _present(graph: Mapping[str, np.ndarray], prop: str, complete: Mapping[str, bool]) -> Any:
    """Which structures count for ``prop``: all where every frame had it, else those whose
    ``<prop>_weight`` is not 0."""
    weight = graph.get(f"{prop}_weight")
    n = graph["energy"].shape[0]
    if complete[prop] or weight is None:
        return np.ones(n, dtype=bool)
    return np.asarray(weight) != 0


def _heads(graph: Mapping[str, np.ndarray], n_graph: int) -> np.ndarray:
    head = graph.get("head")
    return np.zeros(n_graph, np.int64) if head is None else np.asarray(head, dtype=np.int64)


# ====================================================================== reading
def _parts(store: AnyStore) -> Iterator[GraphStore]:
    """The single-file stores holding ``store``'s structures, in order (opened one by one)."""
    if isinstance(store, ShardedGraphStore):
        for s in range(store.n_shards):
            yield store.shard(s)
    else:
        yield store


def _chunks(store: AnyStore, chunk_rows: int) -> Iterator[tuple[GraphStore, int, int]]:
    """``(part, start, stop)``: runs of consecutive structures of at most ``chunk_rows`` rows
    (atoms + edges + 128 per structure; one structure at least)."""
    for part in _parts(store):
        cost = np.asarray(part.n_node, np.int64) + np.asarray(part.n_edge, np.int64) + _PER_GRAPH
        cum = np.concatenate([[0], np.cumsum(cost)])
        start, n = 0, cost.shape[0]
        while start < n:
            stop = int(np.searchsorted(cum, cum[start] + chunk_rows, side="right")) - 1
            stop = min(n, max(stop, start + 1))
            yield part, start, stop
            start = stop


def _second_pass(
    store: AnyStore,
    chunk_rows: int,
    zs: np.ndarray,
    groups: Mapping[int, _Group],
    complete: Mapping[str, bool],
) -> None:
    """Per-atom interaction energies (they need the E0s), from atomic numbers and energies."""
    for part, start, stop in _chunks(store, chunk_rows):
        packed = part.packed()  # the rows were CRC-checked by the first pass's arrays()
        no = packed.node_offsets
        n_node = np.asarray(packed.n_node[start:stop], dtype=np.int64)
        gid = np.repeat(np.arange(stop - start), n_node)
        counts = _counts(packed.node["atomic_numbers"][no[start] : no[stop]], gid, stop - start, zs)
        graph = {k: v[start:stop] for k, v in packed.graph.items()}
        has_e = _present(graph, "energy", complete)
        energy = np.asarray(graph["energy"], dtype=np.float64)
        head = _heads(graph, stop - start)
        for code, group in groups.items():
            m = has_e if code < 0 else has_e & (head == code)
            group.add_per_atom(counts[m], energy[m], n_node[m])


def _complete(store: AnyStore, prop: str) -> bool:
    """Whether every frame had ``prop`` (the build's ``meta["frames_with"]``; assumed so where
    the store does not say)."""
    counts = store.meta.get("frames_with")
    if not isinstance(counts, Mapping) or prop not in counts:
        return True
    return int(counts[prop]) >= len(store)


def _check_fields(store: AnyStore) -> None:
    """The fields the statistics need, with the atomistic schema's levels and shapes."""
    where = str(store.path)
    need: dict[str, tuple[str, list[int], str]] = {
        "atomic_numbers": (
            "node",
            [],
            "not an atomistic store: build one with 'graphbatch data build extxyz' or 'ase-db'",
        ),
        "energy": ("graph", [], "built without energies: set --energy-key to the energy's key"),
    }
    for name, (level, shape, why) in need.items():
        spec = store.fields.get(name)
        if spec is None or spec.get("level") != level:
            raise InputError(f"{where!r}: no {level}-level {name!r} field ({why})")
        if list(spec.get("shape", ())) != shape:
            raise InputError(f"{where!r}: {name!r} has rows of shape {spec.get('shape')}, not ()")
    if np.dtype(store.fields["atomic_numbers"]["dtype"]).kind not in "iu":
        raise InputError(f"{where!r}: 'atomic_numbers' is not an integer field")
    spec = store.fields.get("forces")
    if spec is not None and (spec.get("level") != "node" or list(spec.get("shape", ())) != [3]):
        raise InputError(f"{where!r}: 'forces' is not a per-atom [N, 3] field")


def _elements(z: np.ndarray, zs: np.ndarray, where: str) -> np.ndarray:
    """``zs`` with the elements of ``z`` added (atomic numbers must be 0..255)."""
    if z.size == 0:
        return zs
    low, high = int(z.min()), int(z.max())
    if low < 0 or high > 255:
        bad = low if low < 0 else high
        raise InputError(f"{where!r}: atomic number {bad} is outside 0..255 (damaged store?)")
    seen = np.flatnonzero(np.bincount(z.astype(np.int64), minlength=256))
    return np.union1d(zs, seen).astype(np.int64)


def _head_name(names: Any, code: int) -> str:
    return str(names[code]) if isinstance(names, list) and 0 <= code < len(names) else str(code)


def atoms_statistics(
    store: AnyStore | str | os.PathLike, *, chunk_rows: int = CHUNK_ROWS
) -> AtomsStatistics:
    """MACE's pre-training statistics of the structures in an atomistic store (built by
    `build_atoms_store` / ``graphbatch data build extxyz``; a sharded store's manifest too):
    E0s by least squares, ``avg_num_neighbors``, the z table, energy and force statistics
    (definitions: `graphbatch.datasets._atoms_stats`). Streams ``chunk_rows`` rows at a time
    (the result does not depend on it beyond rounding). Raises `InputError` naming the store
    and the field for a store without ``atomic_numbers`` or ``energy``."""
    chunk_rows = as_positive_int(chunk_rows, "chunk_rows")
    if isinstance(store, (GraphStore, ShardedGraphStore)):
        return _statistics(store, chunk_rows)
    if not isinstance(store, (str, os.PathLike)):
        raise InputTypeError(f"store must be a GraphStore or a path, got {type(store).__name__}")
    with open_store(store, cache_size=0) as opened:
        return _statistics(opened, chunk_rows)


def _statistics(store: AnyStore, chunk_rows: int) -> AtomsStatistics:
    _check_fields(store)
    has_forces = "forces" in store.fields
    complete = {p: _complete(store, p) for p in ("energy", "forces")}
    names = store.meta.get("heads")
    per_head = isinstance(names, list) and len(names) > 1 and "head" in store.fields
    groups: dict[int, _Group] = {-1: _Group()}  # -1: the whole store
    zs = np.zeros(0, dtype=np.int64)
    for part, start, stop in _chunks(store, chunk_rows):
        g = part.arrays(start, stop)
        zs = _elements(g.node["atomic_numbers"], zs, str(store.path))
        c = _chunk(g, zs, complete)
        groups[-1].add(c, None)
        if per_head:
            for code in np.unique(c.head).tolist():
                groups.setdefault(code, _Group()).add(c, c.head == code)
    if groups[-1].n_energy == 0:
        raise InputError(
            f"{str(store.path)!r}: no structure has an energy (every energy_weight is 0)"
        )
    for group in groups.values():
        group.solve(zs)
    _second_pass(store, chunk_rows, zs, groups, complete)
    heads = {
        _head_name(names, code): group.result(has_forces, {})
        for code, group in sorted(groups.items())
        if code >= 0
    }
    return groups[-1].result(has_forces, heads)
