"""`loader`: planned, padded, device-resident batches for a jitted JAX step.

One plan per epoch from ``(seed, epoch)``; a background thread (the core's
`graphbatch._prefetch`, with collation + ``jax.device_put`` as its transform) makes ``prefetch``
steps ahead; with ``devices=[...]`` every step is one `PaddedGraphs` whose leaves
carry a leading axis of ``len(devices)``, sharded over a 1-D mesh (one equal-shape batch per
device).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._budget import Budget
from .._chunkplan import check_shuffle
from .._chunkplan import plan_epoch as make_plan
from .._consistency import PlanVerifier
from .._errors import InputError, InputTypeError
from .._padlayout import check_cutoff, short_padding_batches
from .._plan import BatchPlan
from .._prefetch import ahead
from .._resume import resume_point
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int
from ._collate import PaddedGraphs
from ._source import as_graph_source, graph_sizes_of, make_padded

__all__ = ["DATA_AXIS", "JaxPlanLoader", "loader", "process_gather", "step_table"]

#: Name of the mesh axis the loader shards the leading (device) axis over.
DATA_AXIS = "data"
#: Name of the prefetch thread (`graphbatch._prefetch.Prefetcher`, consumer-paced).
THREAD_NAME = "graphbatch-jax-prefetch"


def _fingerprint(sizes: GraphSizes, request: dict[str, Any]) -> str:
    """SHA-256 (hex, 16 chars) of the plan request: sizes, strategy, seed, budget, options,
    world size. Two loaders with equal fingerprints make identical plans for every epoch."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(sizes.n_node, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(sizes.n_edge, dtype=np.int64).tobytes())
    if sizes.n_bytes is not None:
        h.update(np.ascontiguousarray(sizes.n_bytes, dtype=np.int64).tobytes())
    h.update(json.dumps(request, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def _budget_list(budget: Budget | Sequence[int]) -> list[int]:
    b = Budget.coerce(budget)
    return [b.n_node, b.n_edge, b.n_graph]


def _check_devices(devices: Iterable[Any]) -> list[Any]:
    try:
        devs = list(devices)
    except TypeError:
        raise InputTypeError(
            f"devices must be a sequence of jax devices, got {devices!r}"
        ) from None
    if not devs:
        raise InputError("devices must name at least one device, got an empty sequence")
    for d in devs:
        if not isinstance(d, jax.Device):
            raise InputTypeError(f"devices must hold jax.Device objects, got {d!r}")
    if len({id(d) for d in devs}) != len(devs):
        raise InputError(f"devices must be distinct, got {devs}")
    return devs


def step_table(plan: BatchPlan, world_size: int) -> np.ndarray:
    """``[num_steps, world_size]`` batch ids of ``plan``: row ``s`` holds each rank's batch at
    step ``s`` (for ``world_size=1``, the batches in plan order)."""
    if world_size == 1:
        return np.arange(len(plan), dtype=np.int64)[:, None]
    if plan.world_size != world_size:
        raise InputError(f"plan is for world size {plan.world_size}, not {world_size}")
    ranks = [plan.rank_batches(r) for r in range(world_size)]
    counts = [r.shape[0] for r in ranks]
    if len(set(counts)) != 1:
        raise InputError(f"distributed plan gives ranks unequal step counts {counts}")
    return np.stack(ranks, axis=1)


def process_gather(row: np.ndarray) -> np.ndarray:
    """``[process_count, len(row)]``: ``row`` (int64) of every JAX process, in process order
    (``jax.experimental.multihost_utils.process_allgather``; sent as int32 pairs, so it works
    without ``jax_enable_x64``). A collective: every process must call it."""
    from jax.experimental import multihost_utils

    words = np.ascontiguousarray(row, dtype=np.int64).view(np.int32)
    out = np.asarray(multihost_utils.process_allgather(words))
    return np.ascontiguousarray(out, dtype=np.int32).reshape(out.shape[0], -1).view(np.int64)


class JaxPlanLoader:
    """Iterable of device-resident `PaddedGraphs`, one per training step of the epoch's plan.

    The epoch lives here only: iteration uses ``epoch``; when it ends -- exhausted, or stopped
    early (``break``, closing the iterator) -- ``epoch`` advances by one. ``set_epoch(e)`` sets the
    epoch of the next iteration (an iteration in progress keeps its plan). ``len()`` is the exact
    number of steps the next iteration yields. ``state_dict()`` taken after receiving step ``k``
    of an epoch resumes (via ``load_state_dict`` on an equal loader) at step ``k + 1``.
    """

    def __init__(
        self,
        source: Any,
        sizes: GraphSizes,
        request: dict[str, Any],
        *,
        devices: list | None,
        prefetch: int,
        cutoff: float | None,
        position_key: str,
        verify_plan: bool = True,
    ) -> None:
        if not isinstance(verify_plan, bool):
            raise InputTypeError(f"verify_plan must be True or False, got {verify_plan!r}")
        self.verify_plan = verify_plan
        self._verifier = PlanVerifier(sizes)
        self.source = source
        self.sizes = sizes
        self._request = dict(request)
        self.devices = devices
        self.world_size = 1 if devices is None else len(devices)
        self.prefetch = prefetch
        self.cutoff = cutoff
        self.position_key = position_key
        self.fingerprint = _fingerprint(sizes, {**self._request, "world_size": self.world_size})
        self._epoch = 0
        self._offset = 0  # steps of self._epoch consumed
        self._generation = 0  # bumped by every iteration start, set_epoch and load_state_dict
        self._cache: tuple[int, BatchPlan, np.ndarray] | None = None
        self.template = source[int(np.argmax(sizes.n_node))] if len(sizes) else None
        if devices is not None:
            self.mesh: Mesh | None = Mesh(np.asarray(devices, dtype=object), (DATA_AXIS,))
            self.sharding: NamedSharding | None = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))
            me = jax.process_index()
            self._local = [r for r, d in enumerate(devices) if d.process_index == me]
            if not self._local:
                raise InputError(
                    f"none of devices belongs to this process (jax.process_index() = {me})"
                )
        else:
            self.mesh = self.sharding = None
            self._local = [0]
        self._steps(0)  # plan epoch 0 now: bad arguments fail here

    # ------------------------------------------------------------------ plans
    @property
    def epoch(self) -> int:
        """The epoch the next iteration plays (or the one in progress)."""
        return self._epoch

    def plan_for_epoch(self, epoch: int | None = None) -> BatchPlan:
        """The whole plan (all ranks) of ``epoch`` (default: the current one)."""
        epoch = self._epoch if epoch is None else as_nonnegative_int(epoch, "epoch")
        return self._planned(epoch)[0]

    @property
    def plan(self) -> BatchPlan:
        return self.plan_for_epoch()

    def _planned(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        cache = self._cache
        if cache is None or cache[0] != epoch:
            kwargs = dict(self._request)
            options = kwargs.pop("options")
            p = make_plan(self.sizes, epoch=epoch, world_size=self.world_size, **kwargs, **options)
            cache = self._cache = (epoch, p, step_table(p, self.world_size))
        return cache[1], cache[2]

    def _steps(self, epoch: int) -> np.ndarray:
        return self._planned(epoch)[1]

    # --------------------------------------------------------------- protocol
    def set_epoch(self, epoch: int) -> None:
        """Play ``epoch`` from its first step at the next iteration."""
        self._epoch = as_nonnegative_int(epoch, "epoch")
        self._offset = 0
        self._generation += 1

    def __len__(self) -> int:
        return int(self._steps(self._epoch).shape[0]) - self._offset

    def host_batch(self, epoch: int, step: int, rank: int = 0) -> PaddedGraphs:
        """Host (NumPy) `PaddedGraphs` of ``rank``'s batch at ``step`` of ``epoch``."""
        p, table = self._planned(epoch)
        b = int(table[step, rank])
        return make_padded(
            self.source,
            p.batch(b),
            p.shape(b),
            template=self.template,
            cutoff=self.cutoff,
            position_key=self.position_key,
        )

    def _device_batch(self, epoch: int, step: int) -> PaddedGraphs:
        if self.devices is None:
            return jax.device_put(self.host_batch(epoch, step))
        assert self.sharding is not None  # set whenever devices are
        parts = {r: self.host_batch(epoch, step, r) for r in self._local}
        first = parts[self._local[0]]
        treedef = jax.tree_util.tree_structure(first)
        leaves = {r: jax.tree_util.tree_leaves(parts[r]) for r in self._local}
        out = []
        for k, leaf in enumerate(jax.tree_util.tree_leaves(first)):
            shards = [jax.device_put(leaves[r][k][None], self.devices[r]) for r in self._local]
            out.append(
                jax.make_array_from_single_device_arrays(
                    (self.world_size, *np.shape(leaf)), self.sharding, shards
                )
            )
        return jax.tree_util.tree_unflatten(treedef, out)

    def verifies(self) -> bool:
        """Whether iterations start with the plan consistency check: ``verify_plan``, several
        JAX processes, and ``devices`` of more than one of them (the processes then share this
        loader's plan)."""
        if not self.verify_plan or self.devices is None or jax.process_count() < 2:
            return False
        return len({d.process_index for d in self.devices}) > 1

    def _verify(self, epoch: int, start: int) -> None:
        """The plan consistency check of the pass ``(epoch, start)`` across JAX processes (one
        `process_gather`, a collective: every process iterates), when `verifies`."""
        if self.verifies():
            self._verifier.verify(
                self._planned(epoch)[0],
                epoch=epoch,
                start=start,
                loader_rank=jax.process_index(),
                gather=process_gather,
                what="JAX processes",
                plan_world=None,
            )

    def __iter__(self) -> Iterator[PaddedGraphs]:
        # a generator: this runs at the first next(), so a set_epoch / load_state_dict between
        # iter() and the first batch takes effect
        self._generation += 1
        mine = self._generation
        epoch, start = self._epoch, self._offset
        self._verify(epoch, start)
        n = int(self._steps(epoch).shape[0])
        made = ahead(
            lambda s: self._device_batch(epoch, s), range(start, n), self.prefetch, name=THREAD_NAME
        )
        try:
            for batch in made:
                if self._generation == mine:
                    self._offset += 1
                yield batch
        finally:
            made.close()
            if self._generation == mine:  # no set_epoch / load_state_dict / new iteration since
                self._epoch, self._offset = epoch + 1, 0

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``epoch``, ``offset`` (its steps consumed) and the plan request's ``fingerprint``."""
        return {
            "epoch": self._epoch,
            "offset": self._offset,
            "fingerprint": self.fingerprint,
            "world_size": self.world_size,
            "num_graphs": len(self.sizes),
        }

    def load_state_dict(
        self, state: dict[str, Any], *, allow_missing_fingerprint: bool = False
    ) -> None:
        """Continue from ``state``: the next iteration starts at step ``offset`` of ``epoch``
        (an offset at the end of its epoch: the next epoch's first step). The same checks as
        the torch loader's (`graphbatch._resume`): ``ValueError`` (`graphbatch.InputError`)
        for anything but a ``state_dict()``, a state of another plan request (sizes, strategy,
        seed, budget, shuffle, options, number of devices), and -- unless
        ``allow_missing_fingerprint=True`` -- a state without ``fingerprint``."""
        recorded = {"world_size": self.world_size, "num_graphs": len(self.sizes)}
        epoch, offset = resume_point(
            state,
            owner="JaxPlanLoader",
            fingerprint=self.fingerprint,
            recorded=recorded,
            total_of=lambda e: int(self._steps(e).shape[0]),
            unit="steps",
            allow_missing_fingerprint=allow_missing_fingerprint,
        )
        self._epoch, self._offset = epoch, offset
        self._generation += 1


def loader(
    source: Any,
    *,
    strategy: str,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    devices: Sequence[Any] | None = None,
    prefetch: int = 2,
    on_oversize: str = "error",
    cutoff: float | None = None,
    shuffle: bool = True,
    sizes: GraphSizes | None = None,
    position_key: str = "pos",
    verify_plan: bool = True,
    **options: Any,
) -> JaxPlanLoader:
    """A `JaxPlanLoader` over ``source`` batched by ``graphbatch.plan(sizes, strategy, ...)``.

    ``source``: a `graphbatch.datasets.GraphStore` or a map-style dataset whose items are
    single-graph ``jraph.GraphsTuple``s with NumPy leaves. ``sizes`` default: the source's
    ``graph_sizes()`` (a store's metadata) or one pass over its graphs. ``devices=None``: each
    step is one `PaddedGraphs` on JAX's default device. ``devices=[d0, ..., dR-1]``: the plan is
    made with ``world_size=R``; each step's leaves have a leading axis ``R`` (entry ``r`` =
    rank ``r``'s batch, all of one padded shape, possibly all padding), placed with
    ``NamedSharding(Mesh(devices, ("data",)), PartitionSpec("data"))``. Under ``jax.distributed``
    give every process the same global ``devices`` list: each collates only the ranks of its
    own devices from the same deterministic plan. ``prefetch`` steps are collated and
    transferred ahead by a background thread (0: in the caller's thread). ``cutoff``: padding
    edges longer than ``cutoff`` (see `collate`). Strategy ``options`` pass to the planner.

    ``verify_plan`` (default True): when ``devices`` belong to several JAX processes
    (``jax.distributed``), every iteration starts, at its first ``next``, with the plan
    consistency check across processes (one ``process_allgather`` of 192 bytes per process):
    `graphbatch.PlanMismatchError` in every process, naming the processes that disagree, when
    their size tables, plan arguments, plans, epochs or resume positions differ. A collective:
    every process must iterate. ``False`` skips it.
    """
    source = as_graph_source(source)
    prefetch = as_nonnegative_int(prefetch, "prefetch")
    if sizes is None:
        sizes = graph_sizes_of(source)
    elif not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    if len(sizes) != len(source):
        raise InputError(f"sizes has {len(sizes)} entries for a source of {len(source)} graphs")
    if len(sizes) == 0:
        raise InputError("source holds no graphs")
    devs = None if devices is None else _check_devices(devices)
    request = {
        "strategy": strategy,
        "batch_size": batch_size,
        "budget": None if budget is None else _budget_list(budget),
        "seed": as_nonnegative_int(seed, "seed"),
        "shuffle": check_shuffle(shuffle),
        "on_oversize": on_oversize,
        "options": dict(options),
    }
    cutoff = check_cutoff(cutoff)
    ld = JaxPlanLoader(
        source,
        sizes,
        request,
        devices=devs,
        prefetch=prefetch,
        cutoff=cutoff,
        position_key=position_key,
        verify_plan=verify_plan,
    )
    if cutoff is not None:
        short = short_padding_batches(ld.plan_for_epoch(0))
        if short.shape[0]:
            warnings.warn(
                f"cutoff={cutoff}: {short.shape[0]} of {len(ld.plan_for_epoch(0))} batches of "
                "epoch 0 have a single padding node, so their padding edges are self-loops",
                stacklevel=2,
            )
    return ld
