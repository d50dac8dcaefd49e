"""Do all ranks of a distributed job hold the same plan? Digests and their comparison.

graphbatch never sends a plan between processes: each rank (a torch process, a JAX process)
plans alone from ``(sizes, strategy, options, seed, epoch, world_size)``. That is only correct
when every node has the same size table (store), the same plan arguments and the same
graphbatch. This module is the framework-free half of the check: SHA-256 digests of those
inputs and of the plan, packed into one row of int64 words per rank (`digest_row`), and the
comparison of the gathered rows (`check_rows`), which raises `PlanMismatchError` naming the
ranks that disagree. The adapters supply the all-gather (``torch.distributed.all_gather``,
``jax.experimental.multihost_utils.process_allgather``); every rank gets the same rows, so every
rank raises the same error and none is left waiting in a later collective.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._errors import InputTypeError, PlanMismatchError
from ._io import json_default
from ._plan import BatchPlan
from ._sizes import GraphSizes
from ._version import __version__

__all__ = [
    "COMPONENTS",
    "PlanMismatchError",
    "PlanVerifier",
    "check_rows",
    "digest_row",
    "hash_size_table",
    "plan_digest",
    "request_digest",
    "sizes_digest",
    "text_digest",
]

#: Components compared across ranks, in this order (the names used in error messages).
COMPONENTS = ("graphbatch version", "size table", "plan request", "plan", "extra")
_WORDS = 4  # a SHA-256 digest as int64 words
#: Plain integers after the digests: the loader's rank (-1: unknown), the plan's world size, the
#: epoch and the batch the pass starts at (-1: unknown).
_TAIL = ("loader rank", "plan world size", "epoch", "start batch")
ROW_WORDS = len(COMPONENTS) * _WORDS + len(_TAIL)


def _update_array(h: Any, name: str, a: np.ndarray | None) -> None:
    h.update(name.encode())
    if a is None:
        h.update(b"\x00none")
        return
    a = np.ascontiguousarray(a, dtype="<i8")
    h.update(f"[{a.shape[0]}]".encode())
    h.update(memoryview(a).cast("B"))  # type: ignore[arg-type]  # a buffer (NumPy stubs: 3.12+)


def _request_meta(plan: BatchPlan) -> dict[str, Any]:
    """The plan's metadata without timing entries (they differ between identical plans)."""
    return {k: v for k, v in plan.meta.items() if not k.endswith("_seconds")}


def _meta_json(plan: BatchPlan) -> str:
    return json.dumps(_request_meta(plan), sort_keys=True, default=json_default)


def plan_digest(plan: BatchPlan) -> str:
    """SHA-256 (hex) of everything that defines a plan: every per-batch array (order, offsets,
    padded and real shapes, costs, ranks, steps, skipped graphs) and its metadata except timings.

    Equal digests mean equal batches, shapes and rank assignments, byte for byte."""
    if not isinstance(plan, BatchPlan):
        raise InputTypeError(f"plan must be a BatchPlan, got {type(plan).__name__}")
    h = hashlib.sha256(b"graphbatch-plan-v1")
    for name in (
        "order",
        "offsets",
        "pad_nodes",
        "pad_edges",
        "pad_graphs",
        "skipped",
        "real_nodes",
        "real_edges",
        "real_cost",
        "rank",
        "step",
    ):
        _update_array(h, name, getattr(plan, name))
    h.update(_meta_json(plan).encode())
    return h.hexdigest()


def hash_size_table(h: Any, sizes: GraphSizes, *, labels: bool = True) -> None:
    """Feed a size table into the hash ``h`` (``hashlib``): for ``n_node``, ``n_edge`` and
    ``n_bytes`` in turn, the array's name (``labels=True``) and its values as little-endian
    int64 (nothing for an absent ``n_bytes``). The one place a size table is hashed:
    `sizes_digest` (labels), and the fingerprint JAX loader states held before the epoch
    schedule (no labels, `graphbatch._schedule`), which must stay loadable."""
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    for name in ("n_node", "n_edge", "n_bytes"):
        arr = getattr(sizes, name)
        if labels:
            h.update(name.encode())
        if arr is not None:
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())


def sizes_digest(sizes: GraphSizes) -> str:
    """SHA-256 (hex) of a size table (`hash_size_table`): equal tables, equal digests. The
    ``sizes_sha256`` of loader fingerprints and the "size table" component compared across
    ranks."""
    h = hashlib.sha256()
    hash_size_table(h, sizes)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """SHA-256 (hex) of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def request_digest(plan: BatchPlan) -> str:
    """SHA-256 (hex) of the plan's request: its metadata without timings (strategy, seed, epoch,
    batch size/budget, options, world size, ...)."""
    return text_digest(_meta_json(plan))


def extra_digest(extra: Mapping[str, Any] | None) -> str:
    """SHA-256 (hex) of ``extra`` as canonical JSON."""
    return text_digest(json.dumps(dict(extra or {}), sort_keys=True, default=json_default))


def version_digest() -> str:
    return text_digest(__version__)


def digest_row(
    digests: Mapping[str, str], *, loader_rank: int, plan_world: int, epoch: int, start: int = -1
) -> np.ndarray:
    """One rank's row for the all-gather: the `COMPONENTS` digests as int64 words (4 each),
    then ``loader_rank`` (-1: unknown), ``plan_world``, ``epoch`` and ``start`` (the batch this
    pass starts at; -1: unknown). ``ROW_WORDS`` int64 values, the same on every platform."""
    words = [np.frombuffer(bytes.fromhex(digests[c]), dtype="<i8") for c in COMPONENTS]
    tail = np.array([loader_rank, plan_world, epoch, start], dtype="<i8")
    return np.concatenate([*words, tail]).astype(np.int64)


def _rank_list(ranks: list[int]) -> str:
    """'0,1' / '0-5,7' (runs of three or more as ranges)."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ranks[i]}-{ranks[j]}")
        else:
            parts.extend(str(r) for r in ranks[i : j + 1])
        i = j + 1
    return ",".join(parts)


_SINGULAR = {"ranks": "rank", "processes": "process"}


def _groups(values: list[str], what: str = "ranks") -> str:
    """'ranks 0,1: ab12cd34; rank 2: 99ffee00' (first 8 characters of each value)."""
    plural = what.split()[-1]
    singular = _SINGULAR.get(plural, plural)
    by: dict[str, list[int]] = {}
    for r, v in enumerate(values):
        by.setdefault(v, []).append(r)
    return "; ".join(
        f"{plural if len(rs) > 1 else singular} {_rank_list(rs)}: {v[:8]}" for v, rs in by.items()
    )


def disagreeing_ranks(rows: np.ndarray) -> list[int]:
    """Ranks whose row (less its loader rank, which differs by design) differs from the row more
    than half of the ranks hold (none when no row has a majority: no side is the odd one)."""
    rows = np.delete(np.asarray(rows, dtype=np.int64), len(COMPONENTS) * _WORDS, axis=1)
    keys = [r.tobytes() for r in rows]
    counts: dict[bytes, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    common = max(counts, key=lambda k: counts[k])
    if 2 * counts[common] <= len(keys):
        return []
    return [r for r, k in enumerate(keys) if k != common]


def check_rows(
    rows: np.ndarray, *, world: int, epoch: Any, what: str = "ranks", plan_world: int | None = -1
) -> None:
    """Compare the gathered rows (``[world, ROW_WORDS]``, row ``r`` from rank ``r``) and raise
    `PlanMismatchError` when any component differs between ranks, when the plan is for another
    world size than ``plan_world`` (default ``world``; ``None``: not checked), or when the
    loaders' ranks are not ``0..world-1`` once each. ``what`` names the participants in the
    message (``"ranks"``, ``"JAX processes"``)."""
    if plan_world == -1:
        plan_world = world
    rows = np.asarray(rows, dtype=np.int64)
    if rows.shape != (world, ROW_WORDS):
        raise PlanMismatchError(
            f"graphbatch plan consistency check: expected {world} rows of "
            f"{ROW_WORDS} words, got shape {rows.shape} (mixed graphbatch "
            "versions?)"
        )
    problems = []
    for i, name in enumerate(COMPONENTS):
        block = rows[:, i * _WORDS : (i + 1) * _WORDS]
        if (block != block[0]).any():
            values = [block[r].astype("<i8").tobytes().hex() for r in range(world)]
            problems.append(f"{name} differs ({_groups(values, what)})")
    base = len(COMPONENTS) * _WORDS
    loader_ranks, plan_worlds, epochs, starts = (rows[:, base + k] for k in range(len(_TAIL)))
    if (epochs != epochs[0]).any():
        problems.append(f"epoch differs ({_groups([str(int(e)) for e in epochs], what)})")
    if (starts >= 0).all() and (starts != starts[0]).any():
        problems.append(
            f"the pass starts at different batches ({_groups([str(int(s)) for s in starts], what)})"
        )
    if not problems and plan_world is not None and int(plan_worlds[0]) != plan_world:
        problems.append(
            f"the plan is for world_size={int(plan_worlds[0])} but the process group "
            f"has {plan_world} ranks"
        )
    if (loader_ranks >= 0).all() and sorted(loader_ranks.tolist()) != list(range(world)):
        by = "process-group rank" if what == "ranks" else _SINGULAR.get(what.split()[-1], what)
        problems.append(
            f"loader ranks by {by} are {loader_ranks.tolist()}, "
            f"expected each of 0..{world - 1} once"
        )
    if problems:
        odd = disagreeing_ranks(rows)
        who = f"; disagreeing {what.split()[-1]}: {_rank_list(odd)}" if odd else ""
        # the same message on every rank: the epoch as the rows say
        known = sorted({int(e) for e in epochs if e >= 0})
        when = (
            f"epoch {epoch}"
            if not known
            else f"epoch {known[0]}"
            if len(known) == 1
            else "epochs " + ", ".join(map(str, known))
        )
        raise PlanMismatchError(
            f"graphbatch plan consistency check failed across {world} {what} ({when}): "
            + "; ".join(problems)
            + who
            + ". Every node needs the same graphbatch version, the same size table (store) "
            "and the same plan arguments (strategy, batch size/budget, seed, options)."
        )


class PlanVerifier:
    """The per-pass check of a loader: ``verify(plan, epoch=, start=, loader_rank=, gather=)``
    digests this epoch's plan (the size table's digest is computed once), gathers one row per
    rank with ``gather`` (``row -> [world, ROW_WORDS]`` array, a collective) and raises
    `PlanMismatchError` on every rank when they disagree. The digests of the latest plan are
    kept (with a weak reference to it), so a pass repeated over the same plan object hashes
    nothing again."""

    __slots__ = ("sizes", "_sizes_digest", "_plan_ref", "_plan_digests")

    def __init__(self, sizes: GraphSizes) -> None:
        self.sizes = sizes
        self._sizes_digest: str | None = None
        self._plan_ref: Any = None
        self._plan_digests: tuple[str, str] | None = None

    def size_table_digest(self) -> str:
        """`sizes_digest` of this verifier's size table (computed once)."""
        if self._sizes_digest is None:
            self._sizes_digest = sizes_digest(self.sizes)
        return self._sizes_digest

    def digests(self, plan: BatchPlan, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The `COMPONENTS` digests of ``plan`` over this verifier's size table."""
        if self._plan_digests is None or self._plan_ref is None or self._plan_ref() is not plan:
            self._plan_digests = (request_digest(plan), plan_digest(plan))
            self._plan_ref = weakref.ref(plan)
        request, plan_d = self._plan_digests
        return {
            "graphbatch version": version_digest(),
            "size table": self.size_table_digest(),
            "plan request": request,
            "plan": plan_d,
            "extra": extra_digest(extra),
        }

    def verify(
        self,
        plan: BatchPlan,
        *,
        epoch: int,
        start: int,
        loader_rank: int,
        gather: Callable[[np.ndarray], np.ndarray],
        what: str = "ranks",
        plan_world: int | None = -1,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Gather this rank's row and compare all of them (`check_rows`; ``plan_world``: the
        world size the plan must be for, default the number of rows, ``None``: unchecked;
        ``extra``: more request facts every rank must share, e.g. a split's digest)."""
        row = digest_row(
            self.digests(plan, extra),
            loader_rank=loader_rank,
            plan_world=plan.world_size,
            epoch=epoch,
            start=start,
        )
        rows = np.asarray(gather(row), dtype=np.int64)
        if rows.ndim != 2 or rows.shape[1:] != row.shape:
            raise PlanMismatchError(
                f"graphbatch plan consistency check: gathered rows of shape "
                f"{rows.shape}, expected (ranks, {row.shape[0]})"
            )
        check_rows(rows, world=rows.shape[0], epoch=epoch, what=what, plan_world=plan_world)

    def __getstate__(self) -> dict[str, Any]:
        return {"sizes": self.sizes, "_sizes_digest": self._sizes_digest}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.sizes = state["sizes"]
        self._sizes_digest = state["_sizes_digest"]
        self._plan_ref = None
        self._plan_digests = None
