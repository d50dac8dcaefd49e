"""MACE (``mace-torch``) as a model of ``graphbatch bench``: data, model, runs and targets.

Three ways to train one small MACE on the same QM9 molecules (MACE's own ``AtomicData`` at
``r_max = cfg.cutoff`` Å), energies + forces, Adam:

- a padded strategy (``dynamic``, ``pack-lpf``, ...): ``gt.loader(..., preset=ga.mace(r_max))``
  batches of one fixed shape, the model built with MACE's compile recipe
  (``mace.tools.compile.prepare``) and ``torch.compile(dynamic=False)`` (eager with
  ``--compile off``), loss `graphbatch.atomistic.energy_force_loss`;
- ``mace-eager``: MACE's own ``DataLoader`` (unpadded ``Batch.from_data_list``), model eager --
  MACE's usual path; loss MACE's ``WeightedEnergyForcesLoss``;
- ``mace-compile``: MACE's unpadded batches, ``prepare`` + ``torch.compile(dynamic=None)`` --
  torch's default, which compiles the first shape static and, when a size changes, recompiles
  with the changed sizes symbolic (automatic dynamic shapes).

Targets: the standardised U0 residual of the bench (`graphbatch.bench._data`) as the energy
(atomic energies E0 = 0: the per-element baseline is already removed) and zero forces (QM9
geometries are DFT-relaxed). Test error: energy RMSE in the target's unit.

Each compiled graph is counted by Dynamo (``counters["stats"]["unique_graphs"]``) and by a
wrapper around the compile backend that records whether the graph has symbolic (dynamic)
shapes and the seconds spent in the backend.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..recipes.mace import ENERGY_WEIGHT, FORCES_WEIGHT, MACE_ELEMENTS, SMALL_MACE
from ..recipes.mace import small_mace as _small_mace
from ..recipes.torch import compile_fresh
from ._config import MACE_BASELINES, BenchConfig, RunSpec
from ._loop import StepSizes
from ._mace_data import MaceData, load_mace_data, load_mace_store_data
from ._modes import device_fed
from ._run import _Run, budget_list
from ._torch_batches import epochs, padded_options, prefetched, store_loader

__all__ = [
    "ENERGY_WEIGHT",
    "FORCES_WEIGHT",
    "MACE_ELEMENTS",
    "SMALL_MACE",
    "MaceData",
    "MaceRun",
    "load_mace_data",
    "load_mace_store_data",
    "mace_targets",
    "small_mace",
]


def small_mace(data: MaceData, *, compiled: bool, seed: int, **options: Any):
    """The bench's small MACE (`SMALL_MACE` updated by ``options``) for ``data`` (its ``r_max``,
    ``avg_num_neighbors``, elements and atomic energies; E0 = 0 when it has none), built with
    ``mace.tools.compile.prepare`` when ``compiled`` (same parameters for the same ``seed``)."""
    return _small_mace(
        r_max=data.r_max,
        avg_num_neighbors=data.avg_num_neighbors,
        compiled=compiled,
        seed=seed,
        elements=data.elements,
        atomic_energies=data.atomic_energies,
        **options,
    )


@dataclass
class CompileLog:
    """Graphs a compile backend received: per graph, whether any input size is symbolic
    (automatic dynamic shapes) and the seconds spent in the backend."""

    dynamic: list[bool] = field(default_factory=list)
    backend_s: list[float] = field(default_factory=list)

    def backend(self, name: str):
        """``name`` (e.g. ``"inductor"``, ``"eager"``) wrapped to log each graph."""
        import torch

        inner = torch._dynamo.lookup_backend(name)

        def logged(gm, example_inputs, **kwargs):
            self.dynamic.append(_has_symbolic_inputs(gm))
            t0 = time.perf_counter()
            out = inner(gm, example_inputs, **kwargs)
            self.backend_s.append(time.perf_counter() - t0)
            return out

        return logged


def _has_symbolic_inputs(gm) -> bool:
    import torch

    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        v = node.meta.get("example_value")
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape):
            return True
    return False


def _dict_nbytes(batch: dict) -> int:
    import torch

    return sum(
        v.element_size() * v.nelement() for v in batch.values() if isinstance(v, torch.Tensor)
    )


class MaceRun(_Run):
    """One MACE run with `_Run`'s loop, compile counts and record; see the module docstring.
    Its batches are ``(batch, dict of tensors)`` pairs: padded runs' dicts come from the MACE
    preset, the baselines' from MACE's ``Batch.to_dict``."""

    def __init__(self, spec: RunSpec, cfg: BenchConfig, data: MaceData) -> None:
        self.spec, self.cfg, self.data = spec, cfg, data
        self.is_pyg_model = False
        self.padded = spec.strategy not in MACE_BASELINES
        options = cfg.model_options.get("mace", {})
        self._place(
            small_mace(data, compiled=spec.compiled, seed=cfg.seed + spec.repeat, **options)
        )
        self.compile_log = CompileLog()
        if spec.compiled:
            backend = self.compile_log.backend(cfg.compile_backend)
            self.fn = compile_fresh(
                self.model, dynamic=False if self.padded else None, backend=backend
            )
        else:
            self.fn = self.model
        self._train_modes(_padded_mace_loss, self._forward)
        self.budget = None
        self.loss_fn: Any = None
        if self.padded:
            opts = padded_options(spec, cfg, data)
            self.budget = budget_list(opts.get("budget"))
            batches = _padded_mace_batches(spec, cfg, data, opts)
        else:
            from mace.modules.loss import WeightedEnergyForcesLoss

            batches = _mace_baseline_batches(spec, cfg, data)
            self.loss_fn = WeightedEnergyForcesLoss(ENERGY_WEIGHT, FORCES_WEIGHT)
        if self.feed_mode == "device":
            batches = device_fed(batches, self.device)
        elif cfg.prefetch > 0:
            batches = prefetched(batches, cfg.prefetch, self.cuda)
        self.batches = batches
        self.reset_counters()
        self.train_loss: list[float] = []

    def _forward(self, model, d: dict) -> Any:
        """The model on a padded batch, positions a fresh leaf (forces are their gradient)."""
        d = dict(d)
        d["positions"] = d["positions"].detach().requires_grad_(True)
        return self.fn(d, training=True)

    # ------------------------------------------------------------------ BenchRun's hooks
    def next_batch(self) -> tuple[Any, dict]:
        import torch

        b = next(self.batches)
        if self.feed_mode == "device":  # on the device already
            d = b
        elif self.padded:
            d = {
                key: v.to(self.device) if isinstance(v, torch.Tensor) else v for key, v in b.items()
            }
        else:
            b = b.to(self.device)
            d = b.to_dict()
        self._batch_ready()
        return b, d

    def update(self, batch: tuple[Any, dict]) -> None:
        b, d = batch
        loss = self.train_step(d) if self.train_step is not None else self._loop_step(b, d)
        self.train_loss.append(float(loss.detach()))
        self._synchronize()

    def _loop_step(self, b, d: dict):
        """The bench's own step (no `TrainStep`): zero, forward, loss, backward, update."""
        self.opt.zero_grad(set_to_none=True)
        if self.spec.compiled:  # MACE's prepare_graph leaves this to the caller
            d["positions"].requires_grad_(True)
        out = self.fn(d, training=True)
        if self.padded:
            loss = _padded_mace_loss(out, d)
        else:
            assert self.loss_fn is not None  # set for the unpadded baselines
            loss = self.loss_fn(b, out)
        loss.backward()
        self.opt.step()
        return loss

    def step_sizes(self, batch: tuple[Any, dict]) -> StepSizes:
        b, d = batch
        n_node, n_edge = int(d["positions"].shape[0]), int(d["edge_index"].shape[1])
        if self.padded:
            real = (
                int(d["graph_mask"].sum()),
                int(d["node_mask"].sum()),
                int(d["edge_mask"].sum()),
            )
            shape: tuple[int, int, int] | None = (n_node, n_edge, int(d["graph_mask"].shape[0]))
        else:
            real, shape = (int(b.num_graphs), n_node, n_edge), None
        return StepSizes(real, (n_node, n_edge), shape, _dict_nbytes(d))

    def evaluate(self) -> tuple[float, float]:
        return _evaluate_mace(self.model, self.data, self.device)

    def record(self, interleaved: bool) -> dict[str, Any]:
        rec = super().record(interleaved)
        log = self.compile_log
        rec.update(
            {
                "model_impl": "mace-torch",
                "compile_backend": self.cfg.compile_backend if self.spec.compiled else None,
                "compile_dynamic": (
                    None if not self.spec.compiled else (False if self.padded else None)
                ),
                "r_max": self.data.r_max,
                "forces_weight": FORCES_WEIGHT,
                "dynamic_graphs": int(sum(log.dynamic)),
                "graph_dynamic": [bool(x) for x in log.dynamic],
                "backend_compile_s": [round(float(x), 3) for x in log.backend_s],
                "train_loss": [round(x, 8) for x in self.train_loss],
                "data_source": "store" if self.data.store is not None else "memory",
            }
        )
        return rec


def _padded_mace_batches(
    spec: RunSpec, cfg: BenchConfig, data: MaceData, options: dict
) -> Generator[Any, None, None]:
    """A padded run's MACE batches, epoch after epoch: the store read by DataLoader workers
    (``--store`` with ``--num-workers``), the store read in the training process, or
    `graphbatch.torch.loader` over the in-memory ``AtomicData`` with the MACE preset."""
    import graphbatch.atomistic as ga

    from ..torch import loader

    if data.store is not None and cfg.num_workers > 0:  # read in the workers
        return epochs(store_loader(spec, cfg, data, preset=_store_preset(data)))
    if data.store is not None:
        return _mace_store_batches(spec, cfg, data, options)
    ld = loader(
        data.train,
        strategy=spec.strategy,
        sizes=data.train_sizes,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        preset=ga.mace(r_max=data.r_max),
        dataloader_kwargs=dict(num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0),
        **options,
    )
    return epochs(ld)


def _mace_baseline_batches(
    spec: RunSpec, cfg: BenchConfig, data: MaceData
) -> Generator[Any, None, None]:
    """MACE's own unpadded batches (its ``DataLoader``, shuffled from ``cfg.seed +
    spec.repeat``), pass after pass."""
    import torch
    from mace.tools import torch_geometric

    gen = torch.Generator().manual_seed(cfg.seed + spec.repeat)
    # mace's loader takes any sequence of graphs (its annotation says Dataset)
    ld = torch_geometric.dataloader.DataLoader(
        data.train,  # type: ignore[arg-type]
        batch_size=spec.batch_size,
        shuffle=True,
        drop_last=False,
        generator=gen,
        num_workers=cfg.num_workers,
        persistent_workers=cfg.num_workers > 0,
    )
    while True:
        yield from ld


def _padded_mace_loss(out: dict, d: dict):
    """`graphbatch.atomistic.energy_force_loss` with the bench's weights."""
    import graphbatch.atomistic as ga

    return ga.energy_force_loss(out, d, energy_weight=ENERGY_WEIGHT, forces_weight=FORCES_WEIGHT)


def _store_preset(data: MaceData):
    """The MACE preset of the bench's atomistic store (its elements, torch's default dtype)."""
    import torch

    import graphbatch.atomistic as ga

    return ga.mace(r_max=data.r_max, z_table=list(data.elements), dtype=torch.get_default_dtype())


def _mace_store_batches(spec, cfg: BenchConfig, data: MaceData, options: dict):
    """``--store``: the plan's batches of the training graphs read from the atomistic store by
    the store batch path with the MACE preset's `StoreView` (no ``AtomicData``)."""

    from ..torch import PlanBatchSampler, StoreBatcher

    view = _store_preset(data).store_reader.for_store(data.store)
    sampler = PlanBatchSampler(
        data.train_sizes,
        spec.strategy,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        extra_padding_nodes=1,
        **options,
    )
    batcher = StoreBatcher(data.store, cutoff=data.r_max, position_key="positions", view=view)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for planned in sampler:
            yield batcher(data.train_index[np.asarray(planned, dtype=np.int64)], planned.shape)
        epoch += 1


def _evaluate_mace(model, data: MaceData, device) -> tuple[float, float]:
    """Test energy MAE and RMSE in the target's unit (MACE's unpadded batches, eager)."""
    import torch
    from mace.tools import torch_geometric

    err = []
    for b in torch_geometric.dataloader.DataLoader(
        data.test,  # type: ignore[arg-type]
        batch_size=64,
        shuffle=False,
    ):
        b = b.to(device)
        out = model(b.to_dict(), training=False, compute_force=False)
        err.append((out["energy"].detach() - b.energy).double().cpu())
    e = torch.cat(err).numpy() * data.scale
    return float(np.abs(e).mean()), float(np.sqrt((e * e).mean()))


def mace_targets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (batch size, repeat): each padded run's speed over ``mace-eager`` and
    ``mace-compile`` -- the median over the steps where neither compiled of the same-step ratio
    of step time per real graph (interleaved runs meet the same machine load step by step; a
    padded batch holds at most ``batch_size - 1`` real graphs), and the ratio of real
    graphs/s with compile time included (``graphs_per_s``) and excluded
    (``steady_graphs_per_s``) -- with the compilations and dynamic graphs of every run."""
    out = []
    mace = [r for r in records if r.get("model") == "mace"]
    keys = sorted({(r["batch_size"], r["repeat"]) for r in mace})
    for b, rep in keys:
        runs = {_label(r): r for r in mace if r["batch_size"] == b and r["repeat"] == rep}
        t: dict[str, Any] = {
            "model": "mace",
            "batch_size": b,
            "repeat": rep,
            "compiles": {k: r["compiles"] for k, r in runs.items()},
            "dynamic_graphs": {k: r.get("dynamic_graphs") for k, r in runs.items()},
            "compile_s": {k: round(r["compile_s"], 2) for k, r in runs.items()},
        }
        ratios: dict[str, dict[str, float]] = {}
        for name, r in runs.items():
            if r["strategy"] in ("mace-eager", "mace-compile"):
                continue
            for base in ("mace-eager", "mace-compile"):
                if base not in runs:
                    continue
                o = runs[base]
                steady = sorted(
                    set(range(len(r["step_ms"])))
                    - set(r["compile_steps"])
                    - set(o["compile_steps"])
                )
                per_step = [
                    (o["step_ms"][i] / max(o["real_graphs_steps"][i], 1))
                    / (r["step_ms"][i] / max(r["real_graphs_steps"][i], 1))
                    for i in steady
                ]
                ratios[f"{name} vs {base}"] = {
                    "median_step_ratio": float(np.median(per_step)) if per_step else float("nan"),
                    "steady_steps": len(per_step),
                    "graphs_per_s_ratio_compile_included": r["graphs_per_s"] / o["graphs_per_s"],
                    "graphs_per_s_ratio_compile_excluded": r["steady_graphs_per_s"]
                    / o["steady_graphs_per_s"],
                }
        t["speedup"] = ratios
        out.append(t)
    return out


def _label(rec: dict[str, Any]) -> str:
    from ..analysis import bench_label

    return bench_label(rec)
