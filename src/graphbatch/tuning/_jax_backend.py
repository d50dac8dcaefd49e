"""`JaxBackend`: probes and validation runs of a JAX step, batches from ``graphbatch.jax.loader``.

Time: ``time.perf_counter`` around one call of the (jitted) step, ``jax.block_until_ready``
on its result. Compilation: the first call of a new shape minus a steady call (tracing,
lowering and XLA compilation). Peak memory: what the factory's ``memory_bytes(batch)`` reports
-- for the built-in models the compiled executable's memory analysis (XLA's buffer assignment:
arguments + outputs - aliased + temporaries, in bytes), the same on CPU and GPU.
"""

from __future__ import annotations

import os
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
    from ..jax import JaxPlanLoader, PaddedGraphs

__all__ = ["JaxBackend", "synthetic_graphs_tuples"]


def synthetic_graphs_tuples(sizes: GraphSizes, seed: int = 0) -> StandInGraphs:
    """Single-graph ``jraph.GraphsTuple``s with exactly ``sizes`` (``z``, ``pos``, random
    edges, ``y``): stand-ins for a size table's graphs, with edges in reverse pairs where every
    edge count is even (as for the torch stand-ins)."""
    import jraph

    from ..datasets import synthetic_graphs

    paired = pairable(sizes)
    ga = synthetic_graphs(sizes, rng=np.random.default_rng(seed), symmetric=paired)
    rng = np.random.default_rng(seed + 1)
    z = rng.integers(1, 10, int(sizes.n_node.sum())).astype(np.int32)
    pos = np.ascontiguousarray(ga.node["pos"], dtype=np.float32)
    ei = ga.edge_index.astype(np.int32)
    y = ga.graph["y"].astype(np.float32)
    no, eo = ga.node_offsets, ga.edge_offsets
    out = StandInGraphs()
    out.reverse_paired = paired
    for i in range(len(sizes)):
        a, b, c, d = int(no[i]), int(no[i + 1]), int(eo[i]), int(eo[i + 1])
        out.append(
            jraph.GraphsTuple(
                n_node=np.array([b - a], np.int32),
                n_edge=np.array([d - c], np.int32),
                nodes={"z": z[a:b], "pos": pos[a:b]},
                edges={},
                globals={"y": y[i : i + 1]},
                senders=ei[0, c:d],  # GraphArrays edge indices are local to their graph
                receivers=ei[1, c:d],
            )
        )
    return out


def _open_source(source: Any, seed: int) -> tuple[Any, bool]:
    if isinstance(source, GraphSizes):
        return synthetic_graphs_tuples(source, seed), True
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        if path.lower().endswith((".h5", ".hdf5", ".json")):
            from ..datasets import open_store

            return open_store(path), False
        return synthetic_graphs_tuples(GraphSizes.load(path), seed), True
    return source, False


def _shape(pg: Any) -> tuple[int, int, int]:
    return (int(pg.node_mask.shape[0]), int(pg.edge_mask.shape[0]), int(pg.graph_mask.shape[0]))


class JaxBackend(Backend):
    """Measures the jitted step of a JAX factory on batches of ``graphbatch.jax.loader`` over
    ``source`` (a graph store or its path, a dataset of single-graph ``GraphsTuple``s, or a size
    table: synthetic graphs). One mode, ``"jit"``; single device (``world_size`` 1)."""

    framework = "jax"
    modes = ("jit",)

    def __init__(
        self,
        source: Any,
        *,
        model: str | Callable[..., Any] = "schnet",
        device: str = "cpu",
        seed: int = 0,
        progress: Callable[[str], object] | None = None,
    ) -> None:
        import jax

        platforms = {d.platform for d in jax.devices()}
        want = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu"}.get(device)
        if want is None:
            raise InputError(f"device must be cpu or gpu for jax, got {device!r}")
        if want not in platforms:
            raise InputError(f"device {device}: JAX's devices are {sorted(platforms)}")
        self.device = want
        dataset, self.synthetic = _open_source(source, seed)
        if progress is not None:
            progress("building the jitted step")
        factory = resolve_factory(model, "jax")
        self.tune_step: TuneStep = as_tune_step(factory(device=want, compile=True, source=dataset))
        self.dataset = self.tune_step.dataset if self.tune_step.dataset is not None else dataset
        self.loader_options = dict(self.tune_step.loader_options)
        self.memory_kind = (
            "xla_memory_analysis" if self.tune_step.memory_bytes is not None else "none"
        )
        get = getattr(self.dataset, "graph_sizes", None)
        if callable(get):
            self._sizes = get()
        else:
            from ..jax import graph_sizes_of

            self._sizes = graph_sizes_of(self.dataset)
        self.batches: dict[int, Any] = {}

    def graph_sizes(self) -> GraphSizes:
        return self._sizes

    def loader(self, request: dict[str, Any], world_size: int = 1) -> JaxPlanLoader:
        if world_size != 1:
            raise InputError("tune --framework jax measures one device; world_size must be 1")
        from ..jax import loader

        return loader(
            self.dataset, sizes=self._sizes, prefetch=0, **{**request, **self.loader_options}
        )

    def batch_at(self, request: dict[str, Any], epoch: int, step: int, world_size: int = 1) -> Any:
        ld = self.loader(request, world_size)
        ld.set_epoch(int(epoch))
        for i, pg in enumerate(ld):
            if i == step:
                return pg
        raise InputError(f"the plan of {request} has no step {step} in epoch {epoch}")

    def _timed(self, pg: Any) -> float:
        import jax

        t0 = time.perf_counter()
        jax.block_until_ready(self.tune_step.step(pg))
        return (time.perf_counter() - t0) * 1e3

    def add_probe(self, spec: ProbeSpec) -> dict[str, float]:
        pg = self.batch_at(spec.request, spec.epoch, spec.step, spec.world_size)
        if _shape(pg) != tuple(spec.shape):
            raise RuntimeError(f"probe batch has shape {_shape(pg)}, expected {spec.shape}")
        self.batches[spec.key] = pg
        return {"jit": self._timed(pg)}

    def time_probe(self, key: int, mode: str) -> float:
        return self._timed(self.batches[key])

    def probe_memory(self, key: int, mode: str) -> int | None:
        fn = self.tune_step.memory_bytes
        return None if fn is None else int(fn(self.batches[key]))

    def open_run(self, request: dict[str, Any], mode: str, world_size: int = 1) -> RequestRun:
        return _JaxRun(self, request, world_size)

    def info(self) -> dict[str, Any]:
        import jax

        out = super().info()
        out.update(
            jax=jax.__version__,
            jax_devices=[str(d) for d in jax.devices()],
            modes=["jit"],
            synthetic_graphs=self.synthetic,
        )
        return out

    def close(self) -> None:
        self.batches.clear()


class _JaxRun(RequestRun):
    def __init__(self, backend: JaxBackend, request: dict[str, Any], world_size: int) -> None:
        self.backend, self.request, self.world_size = backend, request, world_size
        ld = backend.loader(request, world_size)
        ld.set_epoch(0)
        self.it: Iterator[PaddedGraphs] = iter(ld)
        self.last: PaddedGraphs | None

    def step(self) -> tuple[float, tuple[int, int, int], int]:
        self.last = pg = next(self.it)
        ms = self.backend._timed(pg)
        return ms, _shape(pg), int(np.asarray(pg.graph_mask).sum())

    def repeat(self) -> float:
        return self.backend._timed(self.last)

    def peak_bytes(self, index: int) -> int | None:
        fn = self.backend.tune_step.memory_bytes
        if fn is None:
            return None
        return int(fn(self.backend.batch_at(self.request, 0, index, self.world_size)))

    def close(self) -> None:
        self.it = iter(())
        self.last = None
