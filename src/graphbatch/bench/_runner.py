"""Train for N steps per (model, strategy, batch size, repeat) and measure every step.

Per step: batching time (planning + collation: the wait for the next batch), update time
(forward, backward, optimizer step; CUDA synchronised), combined time; Dynamo compilations;
real graphs. Per run: mean/median times, compile count and seconds, peak memory, real graphs/s,
test MAE/RMSE every ``eval_every`` steps. Batches come from `graphbatch.torch.loader` (padded
strategies; with ``data="store"`` from the graph store's batch path,
`graphbatch.torch.StoreBatcher`)
or PyG's ``DataLoader`` (baselines); models from `graphbatch.models`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import InputError
from ._config import MACE_BASELINES, BenchConfig, RunSpec
from ._loop import drive_runs
from ._mace import MaceRun
from ._mace_data import load_mace_data, load_mace_store_data
from ._run import _Run, effective_sharing_strategy

__all__ = ["effective_sharing_strategy", "plan_runs", "run_one", "run_bench"]


def plan_runs(cfg: BenchConfig) -> list[RunSpec]:
    """The runs of ``cfg``, repeat-major (so slow drifts of a shared machine spread over all
    strategies). ``compile='auto'``: padded strategies run compiled on CUDA; on CPU they run
    eager, and ``pack-lpf`` additionally runs compiled (so the bench can pick the faster); for
    ``mace`` every padded strategy runs both ways. MACE's baselines: ``mace-eager`` eager,
    ``mace-compile`` compiled."""
    runs: list[RunSpec] = []
    for r in range(cfg.repeats):
        for m in cfg.models:
            for b in cfg.batch_sizes:
                for s in cfg.strategies:
                    if s in MACE_BASELINES:
                        modes = [s == "mace-compile"]
                    elif s == "pyg-eager" or s == "unpadded":
                        modes = [False]
                    elif s == "pyg-compile" or cfg.compile == "on":
                        modes = [True]
                    elif cfg.compile == "off":
                        modes = [False]
                    elif cfg.device == "cuda":
                        modes = [True]
                    elif m == "mace":  # padding cost (eager) and compile-once, side by side
                        modes = [False, True]
                    else:
                        modes = [False, True] if s == "pack-lpf" else [False]
                    runs.extend(RunSpec(m, s, int(b), r, c) for c in modes)
    return runs


def run_one(
    spec: RunSpec, cfg: BenchConfig, data, *, on_step: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Train ``cfg.steps`` steps of ``spec`` alone and return its record (see docs/bench.md)."""
    _reset_cuda_peak(cfg)
    return _make_run(spec, cfg, data).train_alone(on_step)


def _reset_cuda_peak(cfg: BenchConfig) -> None:
    """On CUDA, free cached blocks and reset the peak-memory counters (peaks of one run alone)."""
    if cfg.device == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _make_run(spec: RunSpec, cfg: BenchConfig, data) -> _Run:
    """`_Run` of ``spec``; MACE's runs are `graphbatch.bench._mace.MaceRun`."""
    if spec.model == "mace":
        return MaceRun(spec, cfg, data)
    return _Run(spec, cfg, data)


def _prepare_torch(cfg: BenchConfig) -> None:
    """Check the device and set torch up for the bench: intra-op threads, Dynamo limits high
    enough that no run falls back to eager silently (static-64 can meet dozens of shapes), a
    fresh Dynamo cache."""
    import torch

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available to torch")
    if cfg.threads is not None:
        torch.set_num_threads(int(cfg.threads))
    torch._dynamo.config.recompile_limit = 10_000
    torch._dynamo.config.accumulated_recompile_limit = 100_000
    torch._dynamo.reset()


def _load_data(cfg: BenchConfig):
    """The data of ``cfg``'s runs: MACE's (from QM9 or ``cfg.store``), a graph store's
    (``cfg.data == "store"``) or the in-memory dataset's."""
    from ._data import load_bench_data

    if "mace" in cfg.models:
        if cfg.store is not None:
            return load_mace_store_data(cfg.store, subset=cfg.subset, seed=cfg.seed)
        return load_mace_data(subset=cfg.subset, r_max=cfg.cutoff, seed=cfg.seed)
    if cfg.store is not None and cfg.data == "store":
        from ._data import load_store_data

        return load_store_data(cfg.store, subset=cfg.subset, seed=cfg.seed)
    return load_bench_data(cfg.dataset, subset=cfg.subset, cutoff=cfg.cutoff, seed=cfg.seed)


@contextmanager
def _sharing_strategy(cfg: BenchConfig) -> Iterator[None]:
    """torch.multiprocessing's sharing strategy set to `effective_sharing_strategy` while the
    runs train, restored after."""
    import torch.multiprocessing as tmp

    sharing = tmp.get_sharing_strategy()
    wanted = effective_sharing_strategy(cfg)
    if wanted is not None:
        tmp.set_sharing_strategy(wanted)
    try:
        yield
    finally:
        tmp.set_sharing_strategy(sharing)


def run_bench(cfg: BenchConfig, *, progress: bool = True, data=None) -> list[dict[str, Any]]:
    """Run every `RunSpec` of ``cfg`` (a tqdm bar over all steps) and return the records.

    ``cfg.interleave`` (default): the runs of one repeat are stepped in turn -- step k of every
    strategy before step k+1 of any -- so that load changes on a shared machine hit all of them
    alike; memory figures are then process-wide. Otherwise runs go one after another."""
    from tqdm.auto import tqdm

    cfg.validate()
    _prepare_torch(cfg)
    if data is None:
        data = _load_data(cfg)
    runs = plan_runs(cfg)
    bar = tqdm(total=len(runs) * cfg.steps, unit="step", disable=not progress)
    try:
        with _sharing_strategy(cfg):
            return drive_runs(
                runs,
                cfg,
                lambda spec: _make_run(spec, cfg, data),
                bar=bar,
                label=_describe,
                before_alone=lambda: _reset_cuda_peak(cfg),
            )
    finally:
        bar.close()


def _describe(spec: RunSpec) -> str:
    return (
        f"{spec.model} {spec.strategy}{' (compiled)' if spec.compiled else ''} "
        f"b={spec.batch_size} r={spec.repeat}"
    )
