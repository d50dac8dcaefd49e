"""`loader`: planned, padded, device-resident batches for a jitted JAX step.

One plan per epoch from ``(seed, epoch)``; a background thread (the core's
`graphbatch._prefetch`, with collation + ``jax.device_put`` as its transform) makes ``prefetch``
steps ahead; with ``devices=[...]`` every step is one `PaddedGraphs` whose leaves
carry a leading axis of ``len(devices)``, sharded over a 1-D mesh (one equal-shape batch per
device).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._padlayout import check_cutoff, short_padding_batches
from .._plan import BatchPlan
from .._prefetch import ahead
from .._schedule import EpochSchedule, Pass, select_graphs, step_table
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int
from ._collate import PaddedGraphs
from ._source import as_graph_source, graph_sizes_of, make_padded

__all__ = ["DATA_AXIS", "JaxPlanLoader", "loader", "process_gather", "step_table"]

#: Name of the mesh axis the loader shards the leading (device) axis over.
DATA_AXIS = "data"
#: Name of the prefetch thread (`graphbatch._prefetch.Prefetcher`, consumer-paced).
THREAD_NAME = "graphbatch-jax-prefetch"


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

    The plans, the split, the epoch cursor, resume state and the consistency check live in the
    `graphbatch._schedule.EpochSchedule` (``schedule``) the torch loader uses too; this class
    collates each step's batches and puts them on the devices.

    Epochs: iteration plays ``epoch``; when it ends -- exhausted, or stopped early (``break``,
    closing the iterator) -- ``epoch`` advances by one. ``set_epoch(e)`` sets the epoch of the
    next iteration (an iteration in progress keeps its plan; a no-op when the next iteration
    already plays ``e``, so a loaded resume point survives it). ``len()`` is the exact number
    of steps the next iteration yields. ``state_dict()`` taken after receiving step ``k`` of an
    epoch resumes (via ``load_state_dict`` on an equal loader) at step ``k + 1``.
    """

    def __init__(
        self,
        source: Any,
        schedule: EpochSchedule,
        *,
        devices: list | None,
        prefetch: int,
        cutoff: float | None,
        position_key: str,
        verify_plan: bool = True,
    ) -> None:
        if not isinstance(verify_plan, bool):
            raise InputTypeError(f"verify_plan must be True or False, got {verify_plan!r}")
        if not isinstance(schedule, EpochSchedule):
            raise InputTypeError(
                f"schedule must be an EpochSchedule, got {type(schedule).__name__}"
            )
        self.verify_plan = verify_plan
        self.source = source
        self.schedule = schedule
        self.devices = devices
        self.world_size = 1 if devices is None else len(devices)
        self.prefetch = prefetch
        self.cutoff = cutoff
        self.position_key = position_key
        sizes = schedule.sizes
        biggest = schedule.dataset_index(int(np.argmax(sizes.n_node))) if len(sizes) else None
        self.template = None if biggest is None else source[biggest]
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
    def sizes(self) -> GraphSizes:
        """Size table of the planned graphs (a split's only, with ``indices``)."""
        return self.schedule.sizes

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The plan request a resumed run must share (`EpochSchedule.fingerprint`)."""
        return self.schedule.fingerprint(self.world_size)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration plays (or the one in progress)."""
        return self.schedule.cursor.epoch

    def plan_for_epoch(self, epoch: int | None = None) -> BatchPlan:
        """The whole plan (all ranks) of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else as_nonnegative_int(epoch, "epoch")
        return self.schedule.plan(epoch, self.world_size)

    @property
    def plan(self) -> BatchPlan:
        return self.plan_for_epoch()

    def _steps(self, epoch: int) -> np.ndarray:
        return self.schedule.steps(epoch, self.world_size)

    # --------------------------------------------------------------- protocol
    def set_epoch(self, epoch: int) -> None:
        """Play ``epoch`` from its first step at the next iteration."""
        self.schedule.cursor.set_epoch(epoch)

    def __len__(self) -> int:
        cursor = self.schedule.cursor
        return int(self._steps(cursor.epoch).shape[0]) - cursor.offset

    def host_batch(self, epoch: int, step: int, rank: int = 0) -> PaddedGraphs:
        """Host (NumPy) `PaddedGraphs` of ``rank``'s batch at ``step`` of ``epoch``."""
        schedule = self.schedule
        p = schedule.plan(epoch, self.world_size)
        b = int(self._steps(epoch)[step, rank])
        return make_padded(
            self.source,
            schedule.graphs(p, b),
            schedule.padded_shape(p, b),
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

    def _verify(self, this: Pass) -> None:
        """The plan consistency check of pass ``this`` across JAX processes (one
        `process_gather`, a collective: every process iterates), when `verifies`."""
        if self.verifies():
            self.schedule.verify(
                this,
                world_size=self.world_size,
                loader_rank=jax.process_index(),
                gather=process_gather,
                what="JAX processes",
                plan_world=None,
            )

    def __iter__(self) -> Iterator[PaddedGraphs]:
        # a generator: this runs at the first next(), so a set_epoch / load_state_dict between
        # iter() and the first batch takes effect
        cursor = self.schedule.cursor
        this = cursor.begin()
        self._verify(this)  # refused: the pass did not count, the next one repeats it
        n = int(self._steps(this.epoch).shape[0])
        made = ahead(
            lambda s: self._device_batch(this.epoch, s),
            range(this.start, n),
            self.prefetch,
            name=THREAD_NAME,
        )
        try:
            for batch in made:
                cursor.consumed(this.id)
                yield batch
        finally:  # exhausted or closed: the next iteration plays the next epoch
            made.close()
            cursor.finished(this.id)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``epoch``, ``offset`` (its steps consumed), the plan request's ``fingerprint`` and,
        for reading, ``seed``, ``strategy``, ``num_replicas`` (= ``world_size``, the number of
        devices) and ``num_graphs`` (`EpochSchedule.state_dict`); JSON-safe."""
        return {**self.schedule.state_dict(self.world_size), "world_size": self.world_size}

    def load_state_dict(
        self, state: dict[str, Any], *, allow_missing_fingerprint: bool = False
    ) -> None:
        """Continue from ``state``: the next iteration starts at step ``offset`` of ``epoch``
        (an offset at the end of its epoch: the next epoch's first step). The same checks as
        the torch loader's (`graphbatch._resume`): ``ValueError`` (`graphbatch.InputError`)
        for anything but a ``state_dict()``, a state of another plan request (sizes, strategy,
        seed, budget, shuffle, options, split, number of devices), and -- unless
        ``allow_missing_fingerprint=True`` -- a state without ``fingerprint``. States of
        earlier versions (a 16-character fingerprint) load too."""
        self.schedule.load_state_dict(
            state,
            world_size=self.world_size,
            owner="JaxPlanLoader",
            unit="steps",
            recorded={"world_size": self.world_size},
            allow_missing_fingerprint=allow_missing_fingerprint,
        )


def loader(
    source: Any,
    *,
    strategy: str,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    shuffle: bool | str = True,
    sizes: GraphSizes | None = None,
    indices: Any = None,
    devices: Sequence[Any] | None = None,
    prefetch: int = 2,
    cutoff: float | None = None,
    position_key: str = "pos",
    spare_padding_node: bool = False,
    verify_plan: bool = True,
    **plan_options: Any,
) -> JaxPlanLoader:
    """A `JaxPlanLoader` over ``source`` batched by ``graphbatch.plan(sizes, strategy, ...)``.

    ``source``: a `graphbatch.datasets.GraphStore` or a map-style dataset whose items are
    single-graph ``jraph.GraphsTuple``s with NumPy leaves. The plan: ``strategy``,
    ``batch_size``, ``budget``, ``seed``, ``shuffle`` (``True``, ``False``, ``"chunks"``) and
    ``plan_options`` (``on_oversize``, strategy options) as for ``graphbatch.plan`` and the
    torch loader. ``indices`` (a split): plan and load only these graphs of ``source`` (distinct
    ints); ``graph_index`` still holds source indices. ``sizes`` default: the source's
    ``graph_sizes()`` (a store's metadata) or one pass over its (selected) graphs; given, it is
    the whole source's table.

    ``devices=None``: each step is one `PaddedGraphs` on JAX's default device.
    ``devices=[d0, ..., dR-1]``: the plan is made with ``world_size=R``; each step's leaves have
    a leading axis ``R`` (entry ``r`` = rank ``r``'s batch, all of one padded shape, possibly
    all padding), placed with ``NamedSharding(Mesh(devices, ("data",)), PartitionSpec("data"))``.
    Under ``jax.distributed`` give every process the same global ``devices`` list: each collates
    only the ranks of its own devices from the same deterministic plan. ``prefetch`` steps are
    collated and transferred ahead by a background thread (0: in the caller's thread).

    Geometry: ``cutoff`` places padding nodes and edges beyond it (see `collate`);
    ``spare_padding_node=True`` adds one padding node to every padded shape, so with ``cutoff``
    no padding edge is a self-loop (default ``False``: batches keep the plan's shapes; without
    it, ``cutoff`` warns about the batches of epoch 0 with one padding node). No ``preset``:
    presets describe torch collation (schema pads, count fields, dict batches); JAX batches
    keep the source's feature tree in jraph's layout.

    ``verify_plan`` (default True): when ``devices`` belong to several JAX processes
    (``jax.distributed``), every iteration starts, at its first ``next``, with the plan
    consistency check across processes (one ``process_allgather`` of 192 bytes per process):
    `graphbatch.PlanMismatchError` in every process, naming the processes that disagree, when
    their size tables, plan arguments, plans, epochs or resume positions differ. A collective:
    every process must iterate. ``False`` skips it.
    """
    source = as_graph_source(source)
    prefetch = as_nonnegative_int(prefetch, "prefetch")
    sizes, chosen = select_graphs(
        len(source), sizes, indices, lambda i: graph_sizes_of(source, i), what="source"
    )
    if len(sizes) == 0:
        raise InputError("source holds no graphs")
    devs = None if devices is None else _check_devices(devices)
    if not isinstance(spare_padding_node, bool):
        raise InputTypeError(
            f"spare_padding_node must be True or False, got {spare_padding_node!r}"
        )
    schedule = EpochSchedule(
        sizes,
        strategy,
        batch_size=batch_size,
        budget=budget,
        seed=seed,
        shuffle=shuffle,
        indices=chosen,
        extra_padding_nodes=int(spare_padding_node),
        **plan_options,
    )
    cutoff = check_cutoff(cutoff)
    ld = JaxPlanLoader(
        source,
        schedule,
        devices=devs,
        prefetch=prefetch,
        cutoff=cutoff,
        position_key=position_key,
        verify_plan=verify_plan,
    )
    if cutoff is not None and not spare_padding_node:
        short = short_padding_batches(ld.plan_for_epoch(0))
        if short.shape[0]:
            warnings.warn(
                f"cutoff={cutoff}: {short.shape[0]} of {len(ld.plan_for_epoch(0))} batches of "
                "epoch 0 have a single padding node, so their padding edges are self-loops "
                "(spare_padding_node=True adds one)",
                stacklevel=2,
            )
    return ld
