"""`EpochSchedule`: the batches of every epoch of one plan request and where a loader is in them,
the framework-free part that both loaders drive (`graphbatch.torch.loader`,
`graphbatch.jax.loader`); an adapter only collates the batches it is given and feeds them.

One schedule holds, for one request (size table, strategy, plan options, seed, shuffle):

- **plans**: the plan of epoch ``e`` for ``R`` ranks is `plan_epoch` of the request with
  ``epoch=e`` (and ``world_size=R`` when ``R > 1``); the latest one is kept;
- **the step table** (`step_table`): row ``s`` holds every rank's batch at step ``s``; a rank's
  slice of the epoch is its column, and every rank has the same number of steps;
- **a split** (``indices``): plans index the selected graphs, batches name dataset indices;
- **the cursor** (`EpochCursor`): the epoch and the position in it, moved by passes,
  ``set_epoch`` and ``load_state_dict`` by the rules below;
- **resume state**: ``state_dict`` (epoch, offset, the request's ``fingerprint``) and
  ``load_state_dict``, checked by `graphbatch._resume.resume_point`; every state an earlier
  version wrote still loads (the JAX loader's 16-character fingerprint included);
- **the plan consistency check** across ranks (`graphbatch._consistency.PlanVerifier`, with the
  split's digest as ``extra``).

Cursor rules (every caller -- a plain loop, ``set_epoch`` on a loader or its samplers,
Lightning, the ``DistributedSampler`` idiom -- moves the one cursor; a pass reads it when it
starts):

- ``set_epoch(e)`` makes the next pass run epoch ``e`` from its first batch. It is a no-op when
  the next pass already is ``e`` (so a resume point loaded for ``e`` survives), and when a pass of
  epoch ``e`` has just been started and nothing of it was consumed (Lightning creates its
  iterator before it calls ``set_epoch``).
- A pass started and then overtaken, before its first batch was consumed, by ``set_epoch`` to
  another epoch or by ``resume_at`` is *superseded* (`EpochCursor.superseded`): whoever serves
  its batches starts a new pass instead, which runs what was set.
- A pass that ended moves the cursor to epoch ``e + 1``, batch 0: one that ran to its end, and
  one whose iterator was closed when the adapter sees that (the JAX loader's generator; a torch
  ``DataLoader`` iterator cannot tell, so the next rule applies there).
- A pass of which nothing was consumed does not count (a new pass repeats its epoch and start).
- A pass stopped early and not ended (``len`` reached by Lightning, ``islice``, a ``break``):
  the next pass runs epoch ``e + 1`` unless ``set_epoch`` or ``load_state_dict`` said otherwise.
- ``offset`` counts the batches of ``epoch`` consumed; a loaded ``(epoch, offset)`` makes the
  next pass start at batch ``offset``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._budget import Budget
from ._chunkplan import check_shuffle, plan_epoch
from ._consistency import PlanVerifier, hash_size_table
from ._errors import InputError, InputTypeError
from ._plan import BatchPlan
from ._resume import resume_point
from ._sizes import GraphSizes
from ._validate import as_index_array, as_nonnegative_int
from .planners import PlanMemo, planning_memo

__all__ = ["EpochCursor", "EpochSchedule", "Pass", "canonical", "select_graphs", "step_table"]


# ------------------------------------------------------------------------------ the cursor
@dataclass(frozen=True)
class Pass:
    """One started iteration: its id (passes are numbered), epoch and first batch."""

    id: int
    epoch: int
    start: int


class EpochCursor:
    """Epoch and consumed-batch offset of a loader (the module docstring gives the rules)."""

    __slots__ = ("epoch", "offset", "armed", "_pass_id", "_consumed")

    def __init__(self) -> None:
        self.epoch = 0  # epoch of the pass in progress (or of the next pass when armed)
        self.offset = 0  # batches of `epoch` consumed (or where the next pass starts when armed)
        self.armed = True  # True: the next pass runs (epoch, offset); False: epoch + 1 from 0
        self._pass_id = 0  # id of the latest pass (0: none yet)
        self._consumed = 0  # batches consumed from the latest pass

    def begin(self) -> Pass:
        """Start a pass: returns what it iterates and makes it the latest pass. A started pass of
        which nothing was consumed does not count: the new pass runs its epoch and start again
        (``DataLoader`` with workers calls ``iter(batch_sampler)`` twice for one iterator)."""
        if not self.armed and self._consumed > 0:
            self.epoch += 1
            self.offset = 0
        self.armed = False
        self._pass_id += 1
        self._consumed = 0
        return Pass(self._pass_id, self.epoch, self.offset)

    def consumed(self, pass_id: int) -> None:
        """One batch of pass ``pass_id`` reached the consumer (ignored for superseded passes)."""
        if pass_id == self._pass_id and not self.armed:
            self.offset += 1
            self._consumed += 1

    def superseded(self, pass_id: int) -> bool:
        """Whether pass ``pass_id`` is the latest, nothing of it was consumed, and ``set_epoch``
        or ``resume_at`` has since chosen what the next pass runs: its iterator must start a
        new pass (`begin`) before it serves a batch."""
        return pass_id == self._pass_id and self.armed and self._consumed == 0

    def finished(self, pass_id: int) -> None:
        """Pass ``pass_id`` ended (ran to its end, or its iterator was closed): the next pass
        runs the following epoch. Ignored for a pass that is not the latest or was overtaken."""
        if pass_id == self._pass_id and not self.armed:
            self.epoch += 1
            self.offset = 0
            self.armed = True

    def set_epoch(self, epoch: int) -> None:
        """The next pass runs ``epoch`` from its first batch (no-op cases: module docstring)."""
        epoch = as_nonnegative_int(epoch, "epoch")
        if epoch == self.epoch and (self.armed or (self._pass_id and self._consumed == 0)):
            return  # already the next pass, or the pass just started and untouched
        self.epoch = epoch
        self.offset = 0
        self.armed = True

    def resume_at(self, epoch: int, offset: int) -> None:
        """The next pass runs ``epoch`` from batch ``offset``."""
        self.epoch = epoch
        self.offset = offset
        self.armed = True

    @property
    def latest_pass(self) -> int:
        """Id of the latest started pass (0: none yet)."""
        return self._pass_id

    def __getstate__(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, object]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"EpochCursor(epoch={self.epoch}, offset={self.offset}, armed={self.armed})"


# ------------------------------------------------------------------ plans, ranks, splits
def step_table(plan: BatchPlan, world_size: int) -> np.ndarray:
    """``[num_steps, world_size]`` batch ids of ``plan``: row ``s`` holds each rank's batch at
    step ``s`` (for ``world_size=1``, the batches in plan order). Ranks with unequal step
    counts are an `InputError` (a data-parallel job would hang)."""
    if world_size == 1:
        return np.arange(len(plan), dtype=np.int64)[:, None]
    if plan.rank is None or plan.step is None or plan.world_size != world_size:
        raise InputError(f"plan is for world size {plan.world_size}, not {world_size}")
    ranks = [plan.rank_batches(r) for r in range(world_size)]
    counts = [r.shape[0] for r in ranks]
    if len(set(counts)) != 1:
        raise InputError(
            f"distributed plan gives ranks unequal step counts {counts}; DDP would hang"
        )
    return np.stack(ranks, axis=1)


def select_graphs(
    n_items: int,
    sizes: GraphSizes | None,
    indices: Any,
    read: Callable[[np.ndarray | None], GraphSizes],
    *,
    what: str = "dataset",
) -> tuple[GraphSizes, np.ndarray | None]:
    """``(sizes of the planned graphs, indices)`` of a loader over ``n_items`` items: every item,
    or the split ``indices`` (distinct ints ``< n_items``). ``sizes`` is the whole table
    (``n_items`` entries, subset here) or ``None``: then ``read(indices)`` reads the sizes of the
    selected items only."""
    if indices is not None:
        indices = as_index_array(indices, "indices", limit=n_items)
    if sizes is None:
        return read(indices), indices
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    if len(sizes) != n_items:
        raise InputError(f"sizes has {len(sizes)} entries for a {what} of {n_items} graphs")
    return (sizes if indices is None else sizes.subset(indices)), indices


def canonical(value: Any) -> Any:
    """A plain, JSON-safe, comparable form of a planning option (tuples -> lists, a `Budget`
    -> ``[n_node, n_edge, n_graph]``, NumPy scalars -> Python, anything else -> its repr)."""
    if isinstance(value, Budget):
        return [value.n_node, value.n_edge, value.n_graph]
    if isinstance(value, (tuple, list)):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# ------------------------------------------------------------------------- the schedule
class EpochSchedule:
    """The plan of every epoch of one request, per number of ranks, and the cursor of the
    loader that runs it (module docstring).

    ``sizes``: the size table of the planned graphs (a split's only, with ``indices``: the
    dataset index of each of them, distinct ints). ``batch_size``, ``budget``, ``seed``,
    ``shuffle`` (``True``, ``False``, ``"chunks"``), ``on_oversize`` and strategy ``options``
    (``chunk_graphs``/``window_chunks`` included) go to `plan_epoch`.
    ``extra_padding_nodes`` is added to every padded node count (a spare padding node).
    """

    def __init__(
        self,
        sizes: GraphSizes,
        strategy: str,
        *,
        batch_size: int | None = None,
        budget: Budget | tuple[int, int, int] | None = None,
        seed: int = 0,
        shuffle: bool | str = True,
        on_oversize: str = "error",
        indices: Any = None,
        extra_padding_nodes: int = 0,
        **options: Any,
    ) -> None:
        if not isinstance(sizes, GraphSizes):
            raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
        self.sizes = sizes
        self.indices = None if indices is None else as_index_array(indices, "indices")
        if self.indices is not None and self.indices.shape[0] != len(sizes):
            raise InputError(
                f"indices has {self.indices.shape[0]} entries for the {len(sizes)} graphs of sizes"
            )
        self.strategy = strategy
        self.seed = as_nonnegative_int(seed, "seed")
        self.shuffle = check_shuffle(shuffle)
        self.extra_padding_nodes = as_nonnegative_int(extra_padding_nodes, "extra_padding_nodes")
        #: every `plan_epoch` argument but the strategy, the epoch and the world size
        self.plan_options: dict[str, Any] = dict(
            batch_size=batch_size,
            budget=budget,
            seed=self.seed,
            shuffle=self.shuffle,
            on_oversize=on_oversize,
            **options,
        )
        self.cursor = EpochCursor()
        self._verifier = PlanVerifier(sizes)
        self._indices_sha256: str | None = None
        self._cache: tuple[tuple[int, int], BatchPlan, np.ndarray] | None = None
        #: the strategy's epoch-independent work (`graphbatch.planners.planning_memo`)
        self._memo = PlanMemo(sizes)

    # ------------------------------------------------------------------ plans
    def _planned(self, epoch: int, world_size: int) -> tuple[BatchPlan, np.ndarray]:
        key = (as_nonnegative_int(epoch, "epoch"), world_size)
        if self._cache is None or self._cache[0] != key:
            kwargs = dict(self.plan_options)
            if world_size > 1:
                kwargs["world_size"] = world_size
            with planning_memo(self._memo):  # epoch-independent work made once
                p = plan_epoch(self.sizes, self.strategy, epoch=key[0], **kwargs)
            self._cache = (key, p, step_table(p, world_size))
        return self._cache[1], self._cache[2]

    def plan(self, epoch: int, world_size: int = 1) -> BatchPlan:
        """The whole plan (all ranks) of ``epoch`` for ``world_size`` ranks."""
        return self._planned(epoch, world_size)[0]

    def steps(self, epoch: int, world_size: int = 1) -> np.ndarray:
        """`step_table` of the plan of ``epoch``: ``[num_steps, world_size]`` batch ids."""
        return self._planned(epoch, world_size)[1]

    def num_steps(self, epoch: int, world_size: int = 1) -> int:
        """Steps of ``epoch`` (batches per rank)."""
        return int(self.steps(epoch, world_size).shape[0])

    def graphs(self, plan: BatchPlan, b: int) -> np.ndarray:
        """Dataset indices of the graphs of batch ``b`` of ``plan`` (in batch order)."""
        graphs = plan.order[plan.offsets[b] : plan.offsets[b + 1]]
        return graphs if self.indices is None else self.indices[graphs]

    def padded_shape(self, plan: BatchPlan, b: int) -> tuple[int, int, int]:
        """``(n_node, n_edge, n_graph)`` of batch ``b``: the plan's, plus the extra padding
        nodes."""
        return (
            int(plan.pad_nodes[b]) + self.extra_padding_nodes,
            int(plan.pad_edges[b]),
            int(plan.pad_graphs[b]),
        )

    def rank_graphs(self, epoch: int, world_size: int, rank: int) -> np.ndarray:
        """Dataset indices of the graphs ``rank`` gets in ``epoch``, in batch order."""
        p, table = self._planned(epoch, world_size)
        parts = [p.order[p.offsets[b] : p.offsets[b + 1]] for b in table[:, rank].tolist()]
        graphs = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return graphs if self.indices is None else self.indices[graphs]

    def dataset_index(self, i: int) -> int:
        """The dataset index of planned graph ``i``."""
        return int(i) if self.indices is None else int(self.indices[i])

    # ------------------------------------------------------------------ state
    def indices_sha256(self) -> str | None:
        """SHA-256 (hex) of ``indices`` as little-endian int64 (a split's identity); ``None``
        without a split."""
        if self.indices is None:
            return None
        if self._indices_sha256 is None:
            data = self.indices.astype("<i8").tobytes()
            self._indices_sha256 = hashlib.sha256(data).hexdigest()
        return self._indices_sha256

    def fingerprint(self, world_size: int) -> dict[str, Any]:
        """What a resumed run must share with the saved one: the strategy, every plan option
        (`canonical` form), the number of graphs, the size table's SHA-256, the extra padding
        nodes, the number of ranks (``num_replicas``) and, with a split, its SHA-256."""
        fp: dict[str, Any] = {"strategy": self.strategy}
        for key, value in sorted(self.plan_options.items()):
            fp[key] = canonical(value)
        fp["num_graphs"] = len(self.sizes)
        fp["sizes_sha256"] = self._verifier.size_table_digest()
        fp["extra_padding_nodes"] = self.extra_padding_nodes
        fp["num_replicas"] = int(world_size)
        if self.indices is not None:  # absent without a split: older states stay loadable
            fp["indices_sha256"] = self.indices_sha256()
        return fp

    def legacy_jax_fingerprint(self, world_size: int) -> str:
        """The fingerprint a JAX loader's state held before this schedule: 16 hex characters of
        the SHA-256 of the size table (no labels) and the request as JSON. A loader with a split
        or extra padding nodes had no such form (its states are dicts)."""
        if self.indices is not None or self.extra_padding_nodes:
            return "(none: a split or extra padding nodes)"
        opts = dict(self.plan_options)
        budget = opts.pop("budget")
        request = {
            "strategy": self.strategy,
            "batch_size": opts.pop("batch_size"),
            "budget": None if budget is None else canonical(Budget.coerce(budget)),
            "seed": opts.pop("seed"),
            "shuffle": opts.pop("shuffle"),
            "on_oversize": opts.pop("on_oversize"),
            "options": opts,
            "world_size": int(world_size),
        }
        h = hashlib.sha256()
        hash_size_table(h, self.sizes, labels=False)
        h.update(json.dumps(request, sort_keys=True, default=repr).encode())
        return h.hexdigest()[:16]

    def state_dict(self, world_size: int) -> dict[str, Any]:
        """``epoch`` and ``offset`` (its batches consumed), the ``fingerprint`` and, for
        reading, the ``seed``, ``strategy``, ``num_replicas`` and ``num_graphs``."""
        return {
            "epoch": self.cursor.epoch,
            "offset": self.cursor.offset,
            "seed": self.seed,
            "strategy": self.strategy,
            "num_replicas": int(world_size),
            "num_graphs": len(self.sizes),
            "fingerprint": self.fingerprint(world_size),
        }

    def load_state_dict(
        self,
        state: Any,
        *,
        world_size: int,
        owner: str,
        unit: str = "batches",
        recorded: Mapping[str, Any] | None = None,
        allow_missing_fingerprint: bool = False,
    ) -> None:
        """Make the next pass continue ``state`` (`resume_point`: its checks and the position);
        ``recorded``: more plain fields compared when a state without a fingerprint is
        allowed (the seed, strategy, number of ranks and graphs always are)."""
        saved = state.get("fingerprint") if isinstance(state, Mapping) else None
        mine: Any = (
            self.legacy_jax_fingerprint(world_size)
            if isinstance(saved, str)
            else self.fingerprint(world_size)
        )
        plain = {
            "seed": self.seed,
            "strategy": self.strategy,
            "num_replicas": int(world_size),
            "num_graphs": len(self.sizes),
            **(recorded or {}),
        }
        epoch, offset = resume_point(
            state,
            owner=owner,
            fingerprint=mine,
            recorded=plain,
            total_of=lambda e: self.num_steps(e, world_size),
            unit=unit,
            allow_missing_fingerprint=allow_missing_fingerprint,
        )
        self.cursor.resume_at(epoch, offset)

    # ------------------------------------------------------------ consistency
    def verify(
        self,
        this: Pass,
        *,
        world_size: int,
        loader_rank: int,
        gather: Callable[[np.ndarray], np.ndarray],
        what: str = "ranks",
        plan_world: int | None = -1,
    ) -> None:
        """The plan consistency check of pass ``this`` (`PlanVerifier.verify`, a collective):
        this epoch's plan, the size table, the version and, with a split, its digest."""
        split = self.indices_sha256()
        self._verifier.verify(
            self.plan(this.epoch, world_size),
            epoch=this.epoch,
            start=this.start,
            loader_rank=loader_rank,
            gather=gather,
            what=what,
            plan_world=plan_world,
            extra=None if split is None else {"indices_sha256": split},
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = None  # re-planned on demand (a plan can be large)
        return state
