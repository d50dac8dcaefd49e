"""One torch training run of ``graphbatch bench``: the models of a run (ours or PyG's SchNet),
their compilation, and `_Run` -- the torch pieces (batch to device, update, Dynamo and CUDA-graph
compile counts, sizes, test error, record facts) of the shared run loop
(`graphbatch.bench._loop.BenchRun`). The MACE runs (`_mace.MaceRun`) extend `_Run`; batches
come from `_torch_batches`; `_runner` plans the runs and drives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..recipes.torch import compile_fresh, padded_mse, reference_model
from ..recipes.torch import compile_padded as _compile_padded
from ._config import BASELINES, BenchConfig, RunSpec
from ._loop import BenchRun, RunFacts, StepSizes
from ._modes import feed_mode, make_train_step, new_captures, optimizer, step_mode
from ._torch_batches import padded_options, run_batches

__all__ = ["bench_model", "budget_list", "compile_padded", "effective_sharing_strategy"]


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


def _build(spec: RunSpec, cfg: BenchConfig) -> tuple[Any, bool]:
    """(the run's model on the CPU, whether it is PyG's); initial weights from ``cfg.seed +
    spec.repeat`` (the same for every strategy of a repeat)."""
    seed = cfg.seed + spec.repeat
    if spec.strategy in ("pyg-eager", "pyg-compile") and spec.model == "schnet":
        import torch

        torch.manual_seed(seed)
        return _pyg_schnet(cfg.cutoff), True
    options = cfg.model_options.get(spec.model, {})
    return reference_model(spec.model, cutoff=cfg.cutoff, seed=seed, options=options), False


def bench_model(name: str, cfg: BenchConfig, *, repeat: int = 0):
    """The reference model ``name`` (``graphbatch.models``) exactly as the bench builds it for
    a padded run: the bench's options (``cutoff``, SchNet's paired edges, ``cfg.model_options``)
    and initial weights from ``cfg.seed + repeat``; on the CPU (move it yourself)."""
    return _build(RunSpec(name, "padded", 2, int(repeat), False), cfg)[0]


def compile_padded(model, cfg: BenchConfig):
    """``model`` compiled as the bench compiles padded runs: ``torch.compile(dynamic=False,
    fullgraph=True)`` with ``cfg``'s backend and mode, through a fresh code object (one
    compilation per padded shape, counted for this model alone)."""
    return _compile_padded(model, backend=cfg.compile_backend, mode=cfg.compile_mode)


def effective_sharing_strategy(cfg: BenchConfig) -> str | None:
    """``cfg.sharing_strategy``; with workers and none given, ``file_system``: torch's default
    ``file_descriptor`` strategy costs a socket round trip per tensor received from a worker
    (~9 ms per batch measured, more than collating in process; benchmarks/RESULTS.md)."""
    if cfg.sharing_strategy is not None:
        return cfg.sharing_strategy
    return "file_system" if cfg.num_workers > 0 else None


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


def _predict_eval(model, b, is_pyg_model):
    """The model's prediction of an unpadded test batch."""
    from ..models import unpadded_inputs

    if is_pyg_model:
        return model(b.z, b.pos, b.edge_index, b.batch)
    return model(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))


def _nbytes(batch) -> int:
    """Bytes of a batch's tensors."""
    import torch

    total = 0
    for v in batch.to_dict().values() if hasattr(batch, "to_dict") else vars(batch).values():
        if isinstance(v, torch.Tensor):
            total += v.element_size() * v.nelement()
    return total


def _padded_loss(out, b):
    """The bench's loss of a padded batch: mean squared error over its real graphs."""
    return padded_mse(out, b.y.view(-1), b.graph_mask)


def budget_list(budget: Any) -> list[int] | None:
    """A `Budget` as the record's ``[n_node, n_edge, n_graph]`` (None stays None)."""
    return None if budget is None else [int(budget.n_node), int(budget.n_edge), int(budget.n_graph)]


# --------------------------------------------------------------------------- one run
class _Run(BenchRun):
    """One torch run: the model (ours, or PyG's SchNet for ``pyg-*``), compiled or eager, trained
    by the captured step or the loop on the run's batches (see `BenchRun` for the loop)."""

    def __init__(self, spec: RunSpec, cfg: BenchConfig, data) -> None:
        self.spec, self.cfg, self.data = spec, cfg, data
        self.padded = spec.strategy not in BASELINES
        model, self.is_pyg_model = _build(spec, cfg)
        self._place(model)
        options = padded_options(spec, cfg, data) if self.padded else {}
        self.budget = budget_list(options.get("budget"))
        if spec.compiled:
            mode = cfg.compile_mode if self.padded else None  # CUDA graphs need static shapes
            self.fn = compile_fresh(
                self.model,
                dynamic=not self.padded,
                fullgraph=self.padded,
                backend=cfg.compile_backend,
                mode=mode,
            )
        else:
            self.fn = self.model
        self._train_modes(_padded_loss, lambda m, b: self._predict(b, self.fn))
        self.batches = run_batches(spec, cfg, data, self.device, self.padded, self.feed_mode)
        self.reset_counters()

    def _place(self, model) -> None:
        """The run's device (``cfg.device``) and ``model`` on it."""
        import torch

        self.device = torch.device(self.cfg.device)
        self.cuda = self.device.type == "cuda"
        self.model = model.to(self.device)

    def _train_modes(self, loss_fn: Callable[[Any, Any], Any], forward: Callable) -> None:
        """The step and feed modes (``--step``, ``--feed``), the optimizer and, for a captured
        step, its `TrainStep` over ``loss_fn`` and ``forward`` (None: the loop trains)."""
        cfg = self.cfg
        self.step_mode, self.feed_mode = step_mode(cfg, self.padded), feed_mode(cfg, self.padded)
        captured = self.step_mode == "captured"
        self.opt = optimizer(self.model.parameters(), cfg.lr, captured and self.cuda)
        self.train_step = (
            make_train_step(self.model, loss_fn, self.opt, forward) if captured else None
        )

    def _predict(self, b, f):
        from ..models import batch_inputs, unpadded_inputs

        if self.is_pyg_model:
            return f(b.z, b.pos, b.edge_index, b.batch)
        if self.padded:
            return f(**batch_inputs(b))
        return f(**unpadded_inputs(b.z, b.pos, b.edge_index, b.batch, b.num_graphs))

    def _synchronize(self) -> None:
        """Wait for the CUDA device (no-op on the CPU)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def _batch_ready(self) -> None:
        """Wait for the step's stream (no-op on the CPU): the batch handed out is then on the
        device, its copy counted as batching. Only that stream: a loader's ``.to`` copies on
        it, a `DeviceFeed` made it wait for that batch's copy only, and the feed's copy of the
        next batch, on its side stream, goes on during the step, as in training."""
        if self.cuda:
            import torch

            torch.cuda.current_stream(self.device).synchronize()

    # ------------------------------------------------------------------ BenchRun's hooks
    def next_batch(self):
        b = next(self.batches)
        if self.feed_mode != "device":  # the feed's batches are on the device already
            b = b.to(self.device, non_blocking=True)
        self._batch_ready()
        return b

    def profile(self, steps: int) -> dict[str, Any]:
        from ._profile import profile_steps

        return profile_steps(lambda: self.update(self.next_batch()), steps, self.cuda)

    def compile_count(self) -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"]) + new_captures(self.train_step)

    def update(self, b) -> None:
        if self.train_step is not None:
            self.train_step(b)
        else:
            self.opt.zero_grad(set_to_none=True)
            out = self._predict(b, self.fn)
            loss = _padded_loss(out, b) if self.padded else ((out - b.y.view(-1)) ** 2).mean()
            loss.backward()
            self.opt.step()
        self._synchronize()

    def step_sizes(self, b) -> StepSizes:
        n_node, n_edge = int(b.num_nodes), int(b.edge_index.shape[1])
        if self.padded:
            real = (int(b.graph_mask.sum()), int(b.node_mask.sum()), int(b.edge_mask.sum()))
            shape: tuple[int, int, int] | None = (n_node, n_edge, int(b.num_graphs))
        else:
            real, shape = (int(b.num_graphs), n_node, n_edge), None
        return StepSizes(real, (n_node, n_edge), shape, _nbytes(b))

    def evaluate(self) -> tuple[float, float]:
        return _evaluate(
            lambda b: _predict_eval(self.model, b, self.is_pyg_model), self.data, self.device
        )

    def facts(self, compiling: np.ndarray, steady: np.ndarray) -> RunFacts:
        import torch

        from ..models import count_parameters

        spec, cfg, update_ms = self.spec, self.cfg, self.update_ms
        compile_s = float(
            np.clip(update_ms[compiling] - np.median(update_ms[steady]), 0, None).sum() / 1e3
        )
        return RunFacts(
            compiled=spec.compiled,
            device=cfg.device,
            num_workers=cfg.num_workers,
            prefetch=cfg.prefetch,
            sharing_strategy=effective_sharing_strategy(cfg),
            params=count_parameters(self.model),
            model_impl="pyg" if self.is_pyg_model else "graphbatch",
            compile_mode=(cfg.compile_mode or "default") if spec.compiled else None,
            compile_s=compile_s,
            distinct_shapes=len(self.shapes) if self.padded else None,
            peak_mem_bytes=(
                int(torch.cuda.max_memory_reserved(self.device)) if self.cuda else self.peak_rss
            ),
            peak_mem_kind="cuda_max_memory_reserved" if self.cuda else "process_rss",
        )

    def trailing_fields(self) -> dict[str, Any]:
        """The record's keys of how the run trained and was fed (added by issue 36): the step
        and feed modes, the CUDA graphs captured, the distinct padded shapes compiled or
        captured and the recompilations beyond the first, and the peak of CUDA memory
        allocated (bytes; None on CPU)."""
        import torch

        captured = new_captures(self.train_step)
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
