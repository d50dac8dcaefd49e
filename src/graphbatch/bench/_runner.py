"""Train for N steps per (model, strategy, batch size, repeat) and measure every step.

Per step: batching time (planning + collation: the wait for the next batch), update time
(forward, backward, optimizer step; CUDA synchronised), combined time; Dynamo compilations;
real graphs. Per run: mean/median times, compile count and seconds, peak memory, real graphs/s,
test MAE/RMSE every ``eval_every`` steps. Batches come from `graphbatch.torch.loader` (padded
strategies) or PyG's ``DataLoader`` (baselines); models from `graphbatch.models`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ._config import BASELINES, BenchConfig

__all__ = ["RunSpec", "plan_runs", "run_one", "run_bench"]


@dataclass(frozen=True)
class RunSpec:
    model: str
    strategy: str
    batch_size: int
    repeat: int
    compiled: bool


def plan_runs(cfg: BenchConfig) -> list[RunSpec]:
    """The runs of ``cfg``, repeat-major (so slow drifts of a shared machine spread over all
    strategies). ``compile='auto'``: padded strategies run compiled on CUDA; on CPU they run
    eager, and ``pack-lpf`` additionally runs compiled (so the bench can pick the faster)."""
    runs = []
    for r in range(cfg.repeats):
        for m in cfg.models:
            for b in cfg.batch_sizes:
                for s in cfg.strategies:
                    if s == "pyg-eager" or s == "unpadded":
                        modes = [False]
                    elif s == "pyg-compile":
                        modes = [True]
                    elif cfg.compile == "on":
                        modes = [True]
                    elif cfg.compile == "off":
                        modes = [False]
                    elif cfg.device == "cuda":
                        modes = [True]
                    else:
                        modes = [False, True] if s == "pack-lpf" else [False]
                    runs.extend(RunSpec(m, s, int(b), r, c) for c in modes)
    return runs


# --------------------------------------------------------------------------- models
def _pyg_schnet(cutoff: float):
    """PyG's SchNet with the hyperparameters of ours, on precomputed radius-graph edges."""
    import torch
    from torch_geometric.nn.models import SchNet as PygSchNet

    class PygSchNetOnEdges(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = PygSchNet(hidden_channels=100, num_filters=100, num_interactions=4,
                                 num_gaussians=25, cutoff=cutoff)

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


# --------------------------------------------------------------------------- batches
def _padded_batches(spec: RunSpec, cfg: BenchConfig, data) -> Iterator[Any]:
    from ..torch import loader

    options = dict(cfg.strategy_options.get(spec.strategy, {}))
    ld = loader(data.train, strategy=spec.strategy, sizes=data.train_sizes,
                batch_size=spec.batch_size, seed=cfg.seed + spec.repeat,
                num_workers=cfg.num_workers, **options)
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        epoch += 1


def _pyg_batches(spec: RunSpec, cfg: BenchConfig, data) -> Iterator[Any]:
    import torch
    from torch_geometric.loader import DataLoader

    gen = torch.Generator().manual_seed(cfg.seed + spec.repeat)
    ld = DataLoader(data.train, batch_size=spec.batch_size, shuffle=True, generator=gen,
                    num_workers=cfg.num_workers)
    while True:
        yield from ld


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
    for v in (batch.to_dict().values() if hasattr(batch, "to_dict") else vars(batch).values()):
        if isinstance(v, torch.Tensor):
            total += v.element_size() * v.nelement()
    return total


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


# --------------------------------------------------------------------------- one run
def run_one(spec: RunSpec, cfg: BenchConfig, data, *, on_step: Callable[[], None] | None = None
            ) -> dict[str, Any]:
    """Train ``cfg.steps`` steps of ``spec`` and return its record (see docs/bench.md)."""
    import torch
    from torch._dynamo.utils import counters

    from ..models import batch_inputs, count_parameters, unpadded_inputs
    from ..torch import masked_mean

    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
    model, is_pyg_model = _build(spec, cfg)
    model = model.to(device)
    padded = spec.strategy not in BASELINES
    if spec.compiled:
        torch._dynamo.reset()  # count this run's compilations from zero
        mode = cfg.compile_mode if padded else None  # CUDA graphs need static shapes
        fn = torch.compile(model, dynamic=not padded, fullgraph=padded,
                           backend=cfg.compile_backend, mode=mode)
    else:
        fn = model
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)

    def predict(b, f):
        if is_pyg_model:
            return f(b.z, b.pos, b.edge_index, b.batch)
        if padded:
            return f(**batch_inputs(b))
        return f(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))

    batches = _padded_batches(spec, cfg, data) if padded else _pyg_batches(spec, cfg, data)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    n = cfg.steps
    batching_ms = np.zeros(n)
    update_ms = np.zeros(n)
    real_graphs = np.zeros(n, dtype=np.int64)
    new_compiles = np.zeros(n, dtype=np.int64)
    shapes: set[tuple[int, int, int]] = set()
    real_nodes = pad_nodes = 0
    peak_rss, batch_bytes = _rss(), 0
    eval_steps, maes, rmses = [], [], []
    graphs_seen = 0
    for k in range(n):
        t0 = time.perf_counter()
        b = next(batches)
        b = b.to(device)
        t1 = time.perf_counter()
        before = counters["stats"]["unique_graphs"]
        opt.zero_grad(set_to_none=True)
        out = predict(b, fn)
        if padded:
            loss = masked_mean((out - b.y.view(-1)) ** 2, b.graph_mask)
        else:
            loss = ((out - b.y.view(-1)) ** 2).mean()
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        new_compiles[k] = counters["stats"]["unique_graphs"] - before
        batching_ms[k] = (t1 - t0) * 1e3
        update_ms[k] = (t2 - t1) * 1e3
        if padded:
            g = int(b.graph_mask.sum())
            shapes.add((int(b.num_nodes), int(b.edge_index.shape[1]), int(b.num_graphs)))
            real_nodes += int(b.node_mask.sum())
            pad_nodes += int(b.num_nodes)
        else:
            g = int(b.num_graphs)
            real_nodes += int(b.num_nodes)
            pad_nodes += int(b.num_nodes)
        real_graphs[k] = g
        graphs_seen += g
        batch_bytes = max(batch_bytes, _nbytes(b))
        peak_rss = max(peak_rss, _rss())
        if (k + 1) % cfg.eval_every == 0 or k + 1 == n:
            mae, rmse = _evaluate(lambda bb: _predict_eval(model, bb, is_pyg_model), data, device)
            eval_steps.append(k + 1)
            maes.append(mae)
            rmses.append(rmse)
        if on_step is not None:
            on_step()
    del batches
    step_ms = batching_ms + update_ms
    compiling = new_compiles > 0
    steady = ~compiling if (~compiling).any() else np.ones(n, dtype=bool)
    compile_s = float(np.clip(update_ms[compiling] - np.median(update_ms[steady]), 0, None).sum()
                      / 1e3)
    peak = int(torch.cuda.max_memory_reserved(device)) if cuda else peak_rss
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "batch_size": spec.batch_size,
        "repeat": spec.repeat,
        "compiled": spec.compiled,
        "device": cfg.device,
        "num_workers": cfg.num_workers,
        "steps": n,
        "params": count_parameters(model),
        "model_impl": "pyg" if is_pyg_model else "graphbatch",
        "compile_mode": (cfg.compile_mode or "default") if spec.compiled else None,
        "compiles": int(new_compiles.sum()),
        "compile_s": compile_s,
        "distinct_shapes": len(shapes) if padded else None,
        "step_ms_mean": float(step_ms.mean()),
        "step_ms_median": float(np.median(step_ms)),
        "update_ms_mean": float(update_ms.mean()),
        "update_ms_median": float(np.median(update_ms)),
        "batching_ms_mean": float(batching_ms.mean()),
        "batching_ms_median": float(np.median(batching_ms)),
        "graphs_per_s": float(graphs_seen / (step_ms.sum() / 1e3)),
        "steady_graphs_per_s": float(real_graphs[steady].sum() / (step_ms[steady].sum() / 1e3)),
        "update_us_per_graph": float(update_ms[steady].sum() * 1e3 / real_graphs[steady].sum()),
        "real_graphs": int(graphs_seen),
        "node_efficiency": float(real_nodes / pad_nodes) if pad_nodes else 1.0,
        "peak_mem_bytes": int(peak),
        "peak_mem_kind": "cuda_max_memory_reserved" if cuda else "process_rss",
        "batch_bytes_max": int(batch_bytes),
        "test_mae": maes[-1],
        "test_rmse": rmses[-1],
        "unit": data.unit,
        "eval_steps": eval_steps,
        "test_mae_curve": maes,
        "test_rmse_curve": rmses,
        "step_ms": [round(float(x), 4) for x in step_ms],
        "compile_steps": [int(i) for i in np.flatnonzero(compiling)],
    }


def _predict_eval(model, b, is_pyg_model):
    from ..models import unpadded_inputs

    if is_pyg_model:
        return model(b.z, b.pos, b.edge_index, b.batch)
    return model(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))


def run_bench(cfg: BenchConfig, *, progress: bool = True, data=None) -> list[dict[str, Any]]:
    """Run every `RunSpec` of ``cfg`` (a tqdm bar over all steps) and return the records."""
    import torch

    from ._data import load_bench_data

    cfg.validate()
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available to torch")
    if data is None:
        data = load_bench_data(cfg.dataset, subset=cfg.subset, cutoff=cfg.cutoff, seed=cfg.seed)
    if cfg.threads is not None:
        torch.set_num_threads(int(cfg.threads))
    runs = plan_runs(cfg)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(runs) * cfg.steps, unit="step", disable=not progress)
    records = []
    try:
        for spec in runs:
            bar.set_description(f"{spec.model} {spec.strategy}{' (compiled)' if spec.compiled else ''}"
                                f" b={spec.batch_size} r={spec.repeat}")
            records.append(run_one(spec, cfg, data, on_step=lambda: bar.update(1)))
    finally:
        bar.close()
    return records

