"""`TorchBackend`: probes and validation runs of a torch model, batches from
``graphbatch.torch.loader``.

Time: ``time.perf_counter`` around one step (``torch.cuda.synchronize`` before and after on
CUDA). Compilation: the first step of a new shape, minus a steady step. Peak memory per step:

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (everything the
  caching allocator hands out: parameters, optimizer state, batch, activations, workspace);
* CPU: the tensor bytes live when the step starts (the storages of every tensor the garbage
  collector tracks: parameters, optimizer state, the batch; deduplicated by storage; the other
  probe batches tune holds are left out) plus the
  peak of tensor bytes allocated during the step (the torch profiler's allocation events with
  ``profile_memory=True``: what torch's CPU allocator hands out, compiled kernels' buffers
  included). It counts tensor memory as ``max_memory_allocated`` does on CUDA, not the process
  RSS (Python objects, compiled code, allocator caches and the memory-mapped store are not in
  it); a gradient freed and re-allocated by the step may be counted twice (at most the size
  of the parameters).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError
from .._sizes import GraphSizes
from ._backend import Backend, ProbeSpec, RequestRun
from ._factory import TuneStep, as_tune_step, resolve_factory
from ._pairs import StandInGraphs, pairable

if TYPE_CHECKING:
    from ..torch import PlanLoader

__all__ = ["TorchBackend", "synthetic_dataset"]


def synthetic_dataset(sizes: GraphSizes, seed: int = 0) -> StandInGraphs:
    """PyG ``Data`` graphs with exactly ``sizes``: ``z`` (atomic numbers 1-9), ``pos`` (Å),
    random edges, ``y`` -- stand-ins for a size table's graphs (a step's cost depends on the
    padded shape, not on the values). Where every edge count is even (a radius graph's table,
    e.g. QM9's) the edges come in reverse pairs as in a radius graph (``reverse_paired``)."""
    import torch
    from torch_geometric.data import Data

    from ..datasets import synthetic_graphs

    paired = pairable(sizes)
    ga = synthetic_graphs(sizes, rng=np.random.default_rng(seed), symmetric=paired)
    rng = np.random.default_rng(seed + 1)
    z = torch.from_numpy(rng.integers(1, 10, int(sizes.n_node.sum())).astype(np.int64))
    pos = torch.from_numpy(np.ascontiguousarray(ga.node["pos"]))
    ei = torch.from_numpy(ga.edge_index.astype(np.int64))
    y = torch.from_numpy(ga.graph["y"])
    no, eo = ga.node_offsets, ga.edge_offsets
    out = StandInGraphs()
    out.reverse_paired = paired
    for i in range(len(sizes)):
        a, b, c, d = int(no[i]), int(no[i + 1]), int(eo[i]), int(eo[i + 1])
        out.append(
            # GraphArrays edge indices are local to their graph already
            Data(z=z[a:b], pos=pos[a:b], edge_index=ei[:, c:d], y=y[i : i + 1], num_nodes=b - a)
        )
    return out


def _open_source(source: Any, seed: int) -> tuple[Any, bool]:
    """(dataset for the loader, whether it is synthetic)."""
    if isinstance(source, GraphSizes):
        return synthetic_dataset(source, seed), True
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        if path.lower().endswith((".h5", ".hdf5", ".json")):
            from ..datasets import open_store

            return open_store(path), False
        return synthetic_dataset(GraphSizes.load(path), seed), True
    return source, False


def _storage_ptrs(batch: Any) -> set[int]:
    """Data pointers of the storages of a batch's tensors."""
    import torch

    values = (
        batch.values()
        if isinstance(batch, dict)
        else (batch.to_dict().values() if hasattr(batch, "to_dict") else vars(batch).values())
    )
    return {int(v.untyped_storage().data_ptr()) for v in values if isinstance(v, torch.Tensor)}


def _live_tensor_bytes(exclude: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    """Bytes of the distinct CPU storages of every tensor the garbage collector tracks, but
    those whose storage starts at a pointer in ``exclude``."""
    import torch

    seen: set[int] = set(exclude)
    total = 0
    plain = (torch.Tensor, torch.nn.Parameter, getattr(torch.nn, "Buffer", torch.Tensor))
    for o in gc.get_objects():
        # plain tensors and parameters only: a compilation's fake or functional tensors (other
        # subclasses) have no storage of their own
        if type(o) in plain:
            try:
                if o.device.type != "cpu":
                    continue
                st = o.untyped_storage()
                p = st.data_ptr()
            except (RuntimeError, NotImplementedError, AttributeError):
                continue  # fake or functional tensors of a compilation: no storage
            if p and p not in seen:
                seen.add(p)
                total += int(st.nbytes())
    return total


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Native (C++) writes to stderr dropped while inside: the profiler's start/stop lines and
    its one-time warning about blocks allocated before it started. Python's own stderr is
    flushed first and restored after (exceptions still propagate)."""
    sys.stderr.flush()
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real file (e.g. captured): leave it
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            try:
                yield
            finally:
                os.dup2(saved, fd)
    finally:
        os.close(saved)


def _allocation_peak(fn: Callable[[], Any]) -> int:
    """Peak of tensor bytes allocated (and not yet freed) while ``fn()`` runs, from the torch
    profiler's allocation events (bytes >= 0)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with (
        _quiet_native_stderr(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            events.append((int(e.start_time_ns), int(e.extra_fields.alloc_size)))
        stack.extend(e.children)
    events.sort()
    live = peak = 0
    for _, size in events:
        live += size
        peak = max(peak, live)
    return peak


def _plan_shape(batch: Any, spare: int) -> tuple[int, int, int]:
    """The plan shape of a padded batch from its masks (a PyG ``Batch`` or a dict)."""
    get: Callable[[str], Any] = (
        batch.get if isinstance(batch, dict) else (lambda k: getattr(batch, k))
    )
    return (
        int(get("node_mask").shape[0]) - spare,
        int(get("edge_mask").shape[0]),
        int(get("graph_mask").shape[0]),
    )


def _real_graphs(batch: Any) -> int:
    get: Callable[[str], Any] = (
        batch.get if isinstance(batch, dict) else (lambda k: getattr(batch, k))
    )
    return int(get("graph_mask").sum())


class TorchBackend(Backend):
    """Measures the steps of a torch factory (see `graphbatch.tuning.resolve_factory`) in the
    ``modes`` asked for (``"compiled"``, ``"eager"``), on batches of ``graphbatch.torch.loader``
    over ``source`` (a graph store or its path, a map-style dataset, or a size table: synthetic
    graphs). ``threads``: ``torch.set_num_threads`` for the measurements (restored on close)."""

    framework = "torch"

    def __init__(
        self,
        source: Any,
        *,
        model: str | Callable[..., Any] = "schnet",
        device: str = "cpu",
        modes: tuple[str, ...] = ("compiled", "eager"),
        threads: int | None = None,
        seed: int = 0,
        progress: Callable[[str], object] | None = None,
    ) -> None:
        import torch

        if device not in ("cpu", "cuda"):
            raise InputError(f"device must be cpu or cuda for torch, got {device!r}")
        if device == "cuda" and not torch.cuda.is_available():
            raise InputError("device cuda: no CUDA device is available to torch")
        for m in modes:
            if m not in ("compiled", "eager"):
                raise InputError(f"torch modes are compiled and eager, got {m!r}")
        self.device, self.modes = device, tuple(modes)
        self.cuda = device == "cuda"
        self.memory_kind = (
            "cuda_max_memory_allocated"
            if self.cuda
            else "cpu_tensor_bytes_live_plus_step_allocations"
        )
        self._threads = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(int(threads))
        dyn = torch._dynamo.config
        self._limits = (dyn.recompile_limit, dyn.accumulated_recompile_limit)
        # one compilation per padded shape: never a silent fall back to eager after 8 shapes
        dyn.recompile_limit = 10_000
        dyn.accumulated_recompile_limit = 100_000
        dataset, self.synthetic = _open_source(source, seed)
        factory = resolve_factory(model, "torch")
        self.steps: dict[str, TuneStep] = {}
        for m in self.modes:
            if progress is not None:
                progress(f"building the {m} step")
            self.steps[m] = as_tune_step(
                factory(device=device, compile=m == "compiled", source=dataset)
            )
        first = self.steps[self.modes[0]]
        self.dataset = first.dataset if first.dataset is not None else dataset
        self.loader_options = dict(first.loader_options)
        from ..torch import read_sizes

        self._sizes = read_sizes(self.dataset)
        self.batches: dict[int, Any] = {}
        self._peak_warm: set[str] = set()

    def graph_sizes(self) -> GraphSizes:
        return self._sizes

    # ----------------------------------------------------------------- batches
    def loader(self, request: dict[str, Any], world_size: int = 1) -> PlanLoader:
        from ..torch import loader

        kw = dict(self.loader_options)
        if world_size > 1:
            kw.update(num_replicas=world_size, rank=0)
        return loader(self.dataset, sizes=self._sizes, **request, **kw)

    def batch_at(
        self,
        request: dict[str, Any],
        epoch: int,
        step: int,
        world_size: int = 1,
    ) -> tuple[Any, tuple[int, int, int]]:
        """(batch, plan shape) of step ``step`` of epoch ``epoch`` of ``request``'s plan."""
        ld = self.loader(request, world_size)
        ld.set_epoch(int(epoch))
        spare = int(getattr(ld.batch_sampler, "extra_padding_nodes", 0))
        for i, b in enumerate(ld):
            if i == step:
                return b, _plan_shape(b, spare)
        raise InputError(f"the plan of {request} has no step {step} in epoch {epoch}")

    # ----------------------------------------------------------------- timing
    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def _timed(self, mode: str, batch: Any) -> float:
        self._sync()
        t0 = time.perf_counter()
        self.steps[mode].step(batch)
        self._sync()
        return (time.perf_counter() - t0) * 1e3

    def add_probe(self, spec: ProbeSpec) -> dict[str, float]:
        batch, shape = self.batch_at(spec.request, spec.epoch, spec.step, spec.world_size)
        if shape != tuple(spec.shape):
            raise RuntimeError(f"probe batch has plan shape {shape}, expected {spec.shape}")
        self.batches[spec.key] = batch
        return {m: self._timed(m, batch) for m in self.modes}

    def time_probe(self, key: int, mode: str) -> float:
        return self._timed(mode, self.batches[key])

    def _peak(self, mode: str, batch: Any) -> int:
        import torch

        step = self.steps[mode].step
        if mode not in self._peak_warm:  # the first profiled step allocates once-only buffers
            self._peak_warm.add(mode)
            self._peak(mode, batch)
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            step(batch)
            torch.cuda.synchronize()
            return int(torch.cuda.max_memory_allocated())
        # the other probes' batches are held by tune, not by a training loop: not counted
        others = set().union(
            *(_storage_ptrs(b) for b in self.batches.values() if b is not batch)
        ) - _storage_ptrs(batch)
        live = _live_tensor_bytes(others)
        return live + _allocation_peak(lambda: step(batch))

    def probe_memory(self, key: int, mode: str) -> int | None:
        return self._peak(mode, self.batches[key])

    def open_run(self, request: dict[str, Any], mode: str, world_size: int = 1) -> RequestRun:
        return _TorchRun(self, request, mode, world_size)

    def info(self) -> dict[str, Any]:
        import torch

        out = super().info()
        out.update(
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            modes=list(self.modes),
            synthetic_graphs=self.synthetic,
        )
        if self.cuda:
            out["gpu"] = torch.cuda.get_device_name()
        return out

    def close(self) -> None:
        import torch

        torch.set_num_threads(self._threads)
        dyn = torch._dynamo.config
        dyn.recompile_limit, dyn.accumulated_recompile_limit = self._limits
        self.batches.clear()


class _TorchRun(RequestRun):
    def __init__(
        self, backend: TorchBackend, request: dict[str, Any], mode: str, world_size: int
    ) -> None:
        self.backend, self.request, self.mode, self.world_size = backend, request, mode, world_size
        ld = backend.loader(request, world_size)
        ld.set_epoch(0)
        self.spare = int(getattr(ld.batch_sampler, "extra_padding_nodes", 0))
        self.it = iter(ld)

    def step(self) -> tuple[float, tuple[int, int, int], int]:
        self.last = b = next(self.it)
        ms = self.backend._timed(self.mode, b)
        return ms, _plan_shape(b, self.spare), _real_graphs(b)

    def repeat(self) -> float:
        return self.backend._timed(self.mode, self.last)

    def peak_bytes(self, index: int) -> int | None:
        b, _ = self.backend.batch_at(self.request, 0, index, self.world_size)
        return self.backend._peak(self.mode, b)

    def close(self) -> None:
        self.it = iter(())  # drops the loader's iterator and the batch buffers it holds
        self.last = None
