"""One training run of ``graphbatch bench``: `RunSpec`, the models and batch sources of a run,
the per-step counters and `_Run` (build, step, evaluate, record), which the MACE runs
(`_mace.MaceRun`) and the JAX runner extend. `_runner` plans the runs and drives them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis import step_list_fields, step_timing_fields
from ._config import BASELINES, BenchConfig
from ._modes import feed_mode, make_train_step, new_captures, optimizer, step_mode

__all__ = ["RunSpec", "bench_budget", "bench_model", "compile_padded", "effective_sharing_strategy"]


@dataclass(frozen=True)
class RunSpec:
    model: str
    strategy: str
    batch_size: int
    repeat: int
    compiled: bool


# --------------------------------------------------------------------------- models
def _pyg_schnet(cutoff: float):
    """PyG's SchNet with the hyperparameters of ours, on precomputed radius-graph edges."""
    import torch
    from torch_geometric.nn.models import SchNet as PygSchNet

    class PygSchNetOnEdges(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = PygSchNet(
                hidden_channels=100,
                num_filters=100,
                num_interactions=4,
                num_gaussians=25,
                cutoff=cutoff,
            )

        def forward(self, z, pos, edge_index, batch):
            # PyG's SchNet.forward, with the batch's edges instead of its radius_graph call
            net = self.net
            h = net.embedding(z)
            row, col = edge_index
            w = (pos[row] - pos[col]).norm(dim=-1)
            attr = net.distance_expansion(w)
            for block in net.interactions:
                h = h + block(h, edge_index, w, attr)
            h = net.lin2(net.act(net.lin1(h)))
            return net.readout(h, batch, dim=0).view(-1)

    return PygSchNetOnEdges()


def _build(spec: RunSpec, cfg: BenchConfig):
    """(module, step callable inputs builder, uses_padding)."""
    import torch

    from ..models import build_model

    torch.manual_seed(cfg.seed + spec.repeat)  # same initial weights for every strategy
    kwargs: dict[str, Any] = {"cutoff": cfg.cutoff}
    if spec.model == "schnet":
        kwargs["pair_edges"] = True  # QM9 radius graphs: every edge has its reverse
    kwargs.update(cfg.model_options.get(spec.model, {}))
    if spec.strategy in ("pyg-eager", "pyg-compile") and spec.model == "schnet":
        return _pyg_schnet(cfg.cutoff), True
    return build_model(spec.model, **kwargs), False


def bench_model(name: str, cfg: BenchConfig, *, repeat: int = 0):
    """The reference model ``name`` (``graphbatch.models``) exactly as the bench builds it for
    a padded run: the bench's options (``cutoff``, SchNet's paired edges, ``cfg.model_options``)
    and initial weights from ``cfg.seed + repeat``; on the CPU (move it yourself)."""
    return _build(RunSpec(name, "padded", 2, int(repeat), False), cfg)[0]


def compile_padded(model, cfg: BenchConfig):
    """``model`` compiled as the bench compiles padded runs: ``torch.compile(dynamic=False,
    fullgraph=True)`` with ``cfg``'s backend and mode, through a fresh code object (one
    compilation per padded shape, counted for this model alone)."""
    return _compile(
        model, dynamic=False, fullgraph=True, backend=cfg.compile_backend, mode=cfg.compile_mode
    )


# --------------------------------------------------------------------------- batches
def bench_budget(cfg: BenchConfig, sizes, batch_size: int, strategy: str):
    """The budget ``strategy`` gets at ``batch_size``: Algorithm 1's node and edge caps from
    ``cfg.seed`` (the same in every repeat, so compiled runs of later repeats reuse the shape),
    with ``round(cfg.graph_cap_for(strategy) * batch_size)`` graph slots; raised to fit the
    largest graph (heavy-tailed sets, e.g. atomistic stores, at small batch sizes)."""
    from .._budget import Budget, estimate_budget
    from .._random import seed_rng

    # the run-wide generator of plan/compare (graphbatch._random.seed_rng): same seed, same budget
    est = estimate_budget(sizes, int(batch_size), rng=seed_rng(cfg.seed))
    slots = int(round(cfg.graph_cap_for(strategy) * batch_size))
    n_node = max(est.n_node, int(sizes.n_node.max()) + 1)
    n_edge = max(est.n_edge, int(sizes.n_edge.max()))
    return Budget(n_node, n_edge, max(slots, est.n_graph))


def _padded_options(spec: RunSpec, cfg: BenchConfig, data) -> dict[str, Any]:
    """Loader options of a padded strategy: the shared budget where the strategy takes one."""
    from ..planners import get_strategy

    options = dict(cfg.strategy_options.get(spec.strategy, {}))
    if get_strategy(spec.strategy).uses_budget and "budget" not in options:
        options["budget"] = bench_budget(cfg, data.train_sizes, spec.batch_size, spec.strategy)
    return options


def _prefetched(batches: Iterator[Any], depth: int, pin_memory: bool) -> Generator[Any, None, None]:
    """``batches`` made ``depth`` ahead by `graphbatch.torch.prefetch`. A generator, so the thread
    starts at the first step, after every run's model exists (no batch making overlaps another
    run's weight initialisation), and stops when the run closes it."""
    from ..torch import prefetch

    with prefetch(batches, depth, pin_memory=pin_memory) as fetched:
        yield from fetched


def _pin_in_loader(cfg: BenchConfig) -> bool:
    """Pinned host batches for asynchronous copies to CUDA (by the prefetch thread if any; the
    device feed pins by itself)."""
    return cfg.device == "cuda" and cfg.prefetch == 0 and cfg.feed != "device"


def _padded_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    from ..torch import loader

    options = _padded_options(spec, cfg, data)
    ld = loader(
        data.train,
        strategy=spec.strategy,
        sizes=data.train_sizes,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        dataloader_kwargs=dict(
            num_workers=cfg.num_workers,
            persistent_workers=cfg.num_workers > 0,
            pin_memory=_pin_in_loader(cfg),
        ),
        **options,
    )
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        epoch += 1


def _with_target(b, target):
    """``b`` with ``y`` the bench target of its real graphs (0 for padding), on ``b``'s device."""
    import torch

    t = target.to(b.graph_mask.device, non_blocking=True)
    b.y = torch.where(b.graph_mask, t[b.graph_index.clamp(min=0)], 0.0).view(-1, 1)
    return b


def _store_loader(spec: RunSpec, cfg: BenchConfig, data, **kwargs: Any):
    """``--data store`` with DataLoader workers: `graphbatch.torch.loader` over the store's
    training graphs, each batch read and padded in a worker (the slot path of the device
    feed); ``kwargs``: e.g. a preset."""
    from ..torch import loader

    return loader(
        data.store,
        strategy=spec.strategy,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        indices=data.train_index,
        dataloader_kwargs=dict(
            num_workers=cfg.num_workers,
            persistent_workers=True,
            pin_memory=_pin_in_loader(cfg),
        ),
        **kwargs,
        **_padded_options(spec, cfg, data),
    )


def _store_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    """``--data store``: the plan's batches read by the store batch path (one vectorised gather
    per array, no per-graph ``Data``), ``y`` replaced by the bench target (0 for padding)."""
    from ..torch import PlanBatchSampler, StoreBatcher

    options = _padded_options(spec, cfg, data)
    sampler = PlanBatchSampler(
        data.train_sizes,
        spec.strategy,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        **options,
    )
    batcher = StoreBatcher(data.store)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for planned in sampler:
            b = _with_target(
                batcher(data.train_index[np.asarray(planned, dtype=np.int64)], planned.shape),
                data.target,
            )
            if _pin_in_loader(cfg):
                b = b.pin_memory()
            yield b
        epoch += 1


def _pyg_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    import torch
    from torch_geometric.loader import DataLoader

    from ..torch import GraphStoreDataset

    gen = torch.Generator().manual_seed(cfg.seed + spec.repeat)
    train = data.train
    if data.store is not None:  # the baselines get the same training graphs as Data
        ds = GraphStoreDataset(data.store)
        train = []
        for i in data.train_index.tolist():
            d = ds[i]
            train.append(
                type(d)(
                    z=d.z,
                    pos=d.pos,
                    edge_index=d.edge_index,
                    y=data.target[i : i + 1],
                    num_nodes=d.num_nodes,
                )
            )
        data.train = train
    ld = DataLoader(
        train,
        batch_size=spec.batch_size,
        shuffle=True,
        generator=gen,
        num_workers=cfg.num_workers,
        persistent_workers=cfg.num_workers > 0,
        pin_memory=_pin_in_loader(cfg),
    )
    while True:
        yield from ld


def _epochs(ld) -> Generator[Any, None, None]:
    """A plan loader's batches, epoch after epoch."""
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        epoch += 1


def _run_batches(spec: RunSpec, cfg: BenchConfig, data, device, padded: bool, feed: str):
    """The batch source of a run: PyG's loader (baselines), the store (read in the training
    process, or by DataLoader workers with ``num_workers``) or the plan loader; then the device
    feed (``feed == "device"``) or the prefetch thread (``cfg.prefetch``)."""
    from functools import partial

    from ._modes import device_fed

    if not padded:
        batches = _pyg_batches(spec, cfg, data)
    elif data.store is not None and cfg.num_workers > 0:
        ld = _store_loader(spec, cfg, data)
        fix = partial(_with_target, target=data.target)
        if feed == "device":
            return device_fed(ld, device, fix)
        batches = (fix(b) for b in _epochs(ld))
    elif data.store is not None:
        batches = _store_batches(spec, cfg, data)
    else:
        batches = _padded_batches(spec, cfg, data)
    if feed == "device":
        return device_fed(batches, device)
    if cfg.prefetch > 0:
        return _prefetched(batches, cfg.prefetch, device.type == "cuda")
    return batches


def _padded_loss(out, b):
    """The bench's loss of a padded batch: mean squared error over its real graphs."""
    from ..torch import masked_mean

    return masked_mean((out - b.y.view(-1)) ** 2, b.graph_mask)


# --------------------------------------------------------------------------- evaluation
def _evaluate(predict_unpadded: Callable, data, device) -> tuple[float, float]:
    """Test MAE and RMSE in the target's unit (unpadded batches, eager, no grad)."""
    import torch
    from torch_geometric.loader import DataLoader

    err = []
    with torch.no_grad():
        for b in DataLoader(data.test, batch_size=256, shuffle=False):
            b = b.to(device)
            err.append((predict_unpadded(b) - b.y.view(-1)).double().cpu())
    e = torch.cat(err).numpy() * data.scale
    return float(np.abs(e).mean()), float(np.sqrt((e * e).mean()))


def _nbytes(batch) -> int:
    import torch

    total = 0
    for v in batch.to_dict().values() if hasattr(batch, "to_dict") else vars(batch).values():
        if isinstance(v, torch.Tensor):
            total += v.element_size() * v.nelement()
    return total


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


class _StepCounters:
    """The counters `_reset_counters` sets and `_count_step` books (one set per run), and the
    run's configuration, whose ``eval_every`` `_evaluate_on_schedule` reads."""

    cfg: BenchConfig
    batching_ms: np.ndarray
    update_ms: np.ndarray
    real_graphs: np.ndarray
    new_compiles: np.ndarray
    shapes: set[tuple[int, int, int]]
    real_nodes: int
    pad_nodes: int
    real_edges: int
    pad_edges: int
    peak_rss: int
    batch_bytes: int
    eval_steps: list[int]
    maes: list[float]
    rmses: list[float]


def _reset_counters(run: _StepCounters, steps: int) -> None:
    """The per-step and per-run counters every bench run (torch, MACE, JAX) records: step times
    in ms, real graphs and new compilations per step, shapes met, real/padded node and edge
    totals, peak RSS in bytes and the evaluation history."""
    run.batching_ms = np.zeros(steps)
    run.update_ms = np.zeros(steps)
    run.real_graphs = np.zeros(steps, dtype=np.int64)
    run.new_compiles = np.zeros(steps, dtype=np.int64)
    run.shapes = set()
    run.real_nodes = run.pad_nodes = run.real_edges = run.pad_edges = 0
    run.peak_rss, run.batch_bytes = _rss(), 0
    run.eval_steps = []
    run.maes = []
    run.rmses = []


def _count_step(
    run: _StepCounters,
    k: int,
    *,
    batching_ms: float,
    update_ms: float,
    new_compiles: int,
    real: tuple[int, int, int],
    padded: tuple[int, int],
    shape: tuple[int, int, int] | None,
    nbytes: int,
) -> None:
    """Book step ``k`` in the counters of `_reset_counters`: its batching and update times
    (ms), new compilations, the ``real`` (graphs, nodes, edges) and ``padded`` (nodes, edges)
    sizes of its batch (the real ones again without padding), the padded ``shape`` met (None:
    not counted) and the batch's bytes; then the peak RSS so far."""
    run.batching_ms[k], run.update_ms[k], run.new_compiles[k] = batching_ms, update_ms, new_compiles
    if shape is not None:
        run.shapes.add(shape)
    run.real_graphs[k] = real[0]
    run.real_nodes += real[1]
    run.real_edges += real[2]
    run.pad_nodes += padded[0]
    run.pad_edges += padded[1]
    run.batch_bytes = max(run.batch_bytes, nbytes)
    run.peak_rss = max(run.peak_rss, _rss())


def _evaluate_on_schedule(
    run: _StepCounters, k: int, evaluate: Callable[[], tuple[float, float]]
) -> None:
    """After step ``k`` (0-based): every ``eval_every`` steps and after the last one, append
    ``evaluate()``'s (MAE, RMSE) to the run's evaluation history."""
    if (k + 1) % run.cfg.eval_every == 0 or k + 1 == run.cfg.steps:
        mae, rmse = evaluate()
        run.eval_steps.append(k + 1)
        run.maes.append(mae)
        run.rmses.append(rmse)


# --------------------------------------------------------------------------- one run
def _predict_eval(model, b, is_pyg_model):
    from ..models import unpadded_inputs

    if is_pyg_model:
        return model(b.z, b.pos, b.edge_index, b.batch)
    return model(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))


def effective_sharing_strategy(cfg: BenchConfig) -> str | None:
    """``cfg.sharing_strategy``; with workers and none given, ``file_system``: torch's default
    ``file_descriptor`` strategy costs a socket round trip per tensor received from a worker
    (~9 ms per batch measured, more than collating in process; benchmarks/RESULTS.md)."""
    if cfg.sharing_strategy is not None:
        return cfg.sharing_strategy
    return "file_system" if cfg.num_workers > 0 else None


_RUN_IDS = itertools.count()


def _compile(model, **kwargs):
    """``torch.compile`` of a wrapper whose code object is unique to this run.

    Dynamo caches compiled code per code object; a fresh code object per run keeps runs that
    are stepped in turn (interleaved) from sharing or evicting each other's compilations, so
    each run's count is its own."""
    import types

    import torch

    def call(*args, **kw):
        return model(*args, **kw)

    code = call.__code__.replace(co_name=f"bench_run_{next(_RUN_IDS)}")
    fn = types.FunctionType(
        code, call.__globals__, code.co_name, call.__defaults__, call.__closure__
    )
    return torch.compile(fn, **kwargs)


class _Run(_StepCounters):
    """State of one run; `step` trains one step and times it, `record` summarises."""

    def __init__(self, spec: RunSpec, cfg: BenchConfig, data) -> None:
        import torch

        self.spec, self.cfg, self.data = spec, cfg, data
        self.device = torch.device(cfg.device)
        self.cuda = self.device.type == "cuda"
        model, self.is_pyg_model = _build(spec, cfg)
        self.model = model.to(self.device)
        self.padded = spec.strategy not in BASELINES
        budget = _padded_options(spec, cfg, data).get("budget") if self.padded else None
        self.budget = (
            None
            if budget is None
            else [int(budget.n_node), int(budget.n_edge), int(budget.n_graph)]
        )
        if spec.compiled:
            mode = cfg.compile_mode if self.padded else None  # CUDA graphs need static shapes
            self.fn = _compile(
                self.model,
                dynamic=not self.padded,
                fullgraph=self.padded,
                backend=cfg.compile_backend,
                mode=mode,
            )
        else:
            self.fn = self.model
        self.step_mode, self.feed_mode = step_mode(cfg, self.padded), feed_mode(cfg, self.padded)
        captured = self.step_mode == "captured"
        self.opt = optimizer(self.model.parameters(), cfg.lr, captured and self.cuda)
        self.batches = _run_batches(spec, cfg, data, self.device, self.padded, self.feed_mode)
        self.train_step = (
            make_train_step(
                self.model,
                _padded_loss,
                self.opt,
                lambda m, b: self._predict(b, self.fn),
            )
            if captured
            else None
        )
        _reset_counters(self, cfg.steps)

    def _predict(self, b, f):
        from ..models import batch_inputs, unpadded_inputs

        if self.is_pyg_model:
            return f(b.z, b.pos, b.edge_index, b.batch)
        if self.padded:
            return f(**batch_inputs(b))
        return f(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))

    def step(self, k: int) -> None:
        import torch
        from torch._dynamo.utils import counters

        t0 = time.perf_counter()
        b = next(self.batches)
        b = b.to(self.device, non_blocking=True)
        if self.cuda:  # the copy belongs to batching, not to the update
            torch.cuda.synchronize(self.device)
        t1 = time.perf_counter()
        before = counters["stats"]["unique_graphs"] + new_captures(self.train_step)
        if self.train_step is not None:
            self.train_step(b)
        else:
            self.opt.zero_grad(set_to_none=True)
            out = self._predict(b, self.fn)
            loss = _padded_loss(out, b) if self.padded else ((out - b.y.view(-1)) ** 2).mean()
            loss.backward()
            self.opt.step()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t2 = time.perf_counter()
        n_node, n_edge = int(b.num_nodes), int(b.edge_index.shape[1])
        if self.padded:
            real = (int(b.graph_mask.sum()), int(b.node_mask.sum()), int(b.edge_mask.sum()))
            shape = (n_node, n_edge, int(b.num_graphs))
        else:
            real, shape = (int(b.num_graphs), n_node, n_edge), None
        _count_step(
            self,
            k,
            batching_ms=(t1 - t0) * 1e3,
            update_ms=(t2 - t1) * 1e3,
            new_compiles=counters["stats"]["unique_graphs"]
            + new_captures(self.train_step)
            - before,
            real=real,
            padded=(n_node, n_edge),
            shape=shape,
            nbytes=_nbytes(b),
        )
        _evaluate_on_schedule(
            self,
            k,
            lambda: _evaluate(
                lambda bb: _predict_eval(self.model, bb, self.is_pyg_model), self.data, self.device
            ),
        )

    def record(self, interleaved: bool) -> dict[str, Any]:
        import torch

        from ..models import count_parameters

        spec, cfg, n = self.spec, self.cfg, self.cfg.steps
        self.batches.close()
        batching_ms, update_ms, real_graphs = self.batching_ms, self.update_ms, self.real_graphs
        compiling = self.new_compiles > 0
        steady = ~compiling if (~compiling).any() else np.ones(n, dtype=bool)
        compile_s = float(
            np.clip(update_ms[compiling] - np.median(update_ms[steady]), 0, None).sum() / 1e3
        )
        peak = int(torch.cuda.max_memory_reserved(self.device)) if self.cuda else self.peak_rss
        graphs_seen = int(real_graphs.sum())
        return {
            "model": spec.model,
            "strategy": spec.strategy,
            "batch_size": spec.batch_size,
            "repeat": spec.repeat,
            "compiled": spec.compiled,
            "device": cfg.device,
            "num_workers": cfg.num_workers,
            "prefetch": cfg.prefetch,
            "sharing_strategy": effective_sharing_strategy(cfg),
            "budget": self.budget,
            "graph_cap": cfg.graph_cap_for(spec.strategy) if self.budget is not None else None,
            "interleaved": interleaved,
            "steps": n,
            "params": count_parameters(self.model),
            "model_impl": "pyg" if self.is_pyg_model else "graphbatch",
            "compile_mode": (cfg.compile_mode or "default") if spec.compiled else None,
            "compiles": int(self.new_compiles.sum()),
            "compile_s": compile_s,
            "distinct_shapes": len(self.shapes) if self.padded else None,
            **step_timing_fields(batching_ms, update_ms, real_graphs, steady),
            "real_graphs": graphs_seen,
            "node_efficiency": float(self.real_nodes / self.pad_nodes) if self.pad_nodes else 1.0,
            "edge_efficiency": float(self.real_edges / self.pad_edges) if self.pad_edges else 1.0,
            "peak_mem_bytes": int(peak),
            "peak_mem_kind": ("cuda_max_memory_reserved" if self.cuda else "process_rss")
            + ("_process_wide" if interleaved else ""),
            "batch_bytes_max": int(self.batch_bytes),
            "test_mae": self.maes[-1],
            "test_rmse": self.rmses[-1],
            "unit": self.data.unit,
            "eval_steps": self.eval_steps,
            "test_mae_curve": self.maes,
            "test_rmse_curve": self.rmses,
            **step_list_fields(batching_ms, update_ms, real_graphs, compiling),
            **self._mode_fields(),
        }

    def _mode_fields(self) -> dict[str, Any]:
        """The record's keys of how the run trained and was fed (added by issue 36): the step
        and feed modes, the CUDA graphs captured, the distinct padded shapes compiled or
        captured and the recompilations beyond the first, and the peak of CUDA memory
        allocated (bytes; None on CPU)."""
        import torch

        captured = new_captures(getattr(self, "train_step", None))
        compiled = self.padded and (self.spec.compiled or captured > 0)
        shapes = max(len(self.shapes), captured) if compiled else 0
        return {
            "step_mode": self.step_mode,
            "feed": self.feed_mode,
            "captured_graphs": captured,
            "compiled_shapes": shapes,
            "recompiles": max(shapes - 1, 0),
            "peak_mem_allocated_bytes": (
                int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None
            ),
        }
