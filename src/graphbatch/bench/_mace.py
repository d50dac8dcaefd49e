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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError
from ._config import MACE_BASELINES, BenchConfig
from ._modes import device_fed, feed_mode, make_train_step, new_captures, optimizer, step_mode
from ._run import (
    _compile,
    _count_step,
    _evaluate_on_schedule,
    _padded_options,
    _prefetched,
    _reset_counters,
    _Run,
    _store_loader,
)

if TYPE_CHECKING:
    from .._sizes import GraphSizes

__all__ = ["MACE_ELEMENTS", "MaceData", "MaceRun", "load_mace_data", "mace_targets", "small_mace"]

#: QM9's elements (H, C, N, O, F), the one-hot order of ``node_attrs``.
MACE_ELEMENTS = (1, 6, 7, 8, 9)

#: The small MACE of the bench (``cfg.model_options["mace"]`` overrides any key).
SMALL_MACE = {
    "hidden_irreps": "16x0e + 16x1o",
    "MLP_irreps": "16x0e",
    "max_ell": 2,
    "num_bessel": 8,
    "num_polynomial_cutoff": 5,
    "num_interactions": 2,
    "correlation": 2,
}
#: Loss weights (MACE's ``WeightedEnergyForcesLoss`` and `energy_force_loss` alike).
ENERGY_WEIGHT, FORCES_WEIGHT = 1.0, 10.0


@dataclass
class MaceData:
    """Train/test lists of MACE ``AtomicData`` (float: torch's default dtype) and what the runs
    need: the training graphs' sizes (`GraphSizes`, for plans and budgets), the target scale
    and unit, ``avg_num_neighbors`` (edges per atom over the training graphs), ``r_max``."""

    train: list
    test: list
    train_sizes: GraphSizes
    scale: float
    unit: str
    num_graphs: int
    avg_num_neighbors: float
    r_max: float
    store: Any = None  # an atomistic store (``--store``): padded runs read it directly
    elements: tuple = MACE_ELEMENTS
    atomic_energies: Any = None  # per element (eV); None: zeros
    train_index: Any = None  # store indices of the training graphs


def load_mace_data(*, subset: int | None, r_max: float, seed: int) -> MaceData:
    """The bench split of the first ``subset`` QM9 molecules as MACE ``AtomicData`` built by
    MACE's own neighbour list at ``r_max`` Å (``AtomicData.from_config``)."""
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from .._sizes import GraphSizes
    from ._data import load_bench_arrays

    arrays = load_bench_arrays("qm9", subset=subset, cutoff=r_max, seed=seed)
    ga = arrays.graphs
    z = ga.node["z"].astype(np.int64)
    pos = np.asarray(ga.node["pos"], dtype=np.float64)
    no = ga.node_offsets
    table = AtomicNumberTable(list(MACE_ELEMENTS))

    def atomic(i: int):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(
            atomic_numbers=z[a:b],
            positions=pos[a:b],
            pbc=(False,) * 3,
            cell=None,
            properties={"energy": float(arrays.target[i]), "forces": np.zeros((b - a, 3))},
            property_weights={},
        )
        return AtomicData.from_config(conf, z_table=table, cutoff=float(r_max))

    train = [atomic(int(i)) for i in arrays.train_idx]
    test = [atomic(int(i)) for i in arrays.test_idx]
    n_node = np.array([int(d.positions.shape[0]) for d in train])
    n_edge = np.array([int(d.edge_index.shape[1]) for d in train])
    return MaceData(
        train,
        test,
        GraphSizes(n_node, n_edge),
        arrays.scale,
        arrays.unit,
        len(ga),
        float(n_edge.sum() / max(n_node.sum(), 1)),
        float(r_max),
    )


def small_mace(data: MaceData, *, compiled: bool, seed: int, **options: Any):
    """The bench's small MACE (`SMALL_MACE` updated by ``options``), E0 = 0, built with
    ``mace.tools.compile.prepare`` when ``compiled`` (same parameters for the same ``seed``)."""
    import torch
    from e3nn import o3
    from mace import modules

    cfg = {**SMALL_MACE, **options}
    elements = list(data.elements)
    e0 = (
        np.zeros(len(elements))
        if data.atomic_energies is None
        else np.asarray(data.atomic_energies, dtype=np.float64)
    )
    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    torch.manual_seed(seed)
    kw = dict(
        r_max=data.r_max,
        num_bessel=int(cfg["num_bessel"]),
        num_polynomial_cutoff=int(cfg["num_polynomial_cutoff"]),
        max_ell=int(cfg["max_ell"]),
        interaction_cls=block,
        interaction_cls_first=block,
        num_interactions=int(cfg["num_interactions"]),
        num_elements=len(elements),
        hidden_irreps=o3.Irreps(cfg["hidden_irreps"]),
        MLP_irreps=o3.Irreps(cfg["MLP_irreps"]),
        atomic_energies=e0,
        avg_num_neighbors=data.avg_num_neighbors,
        atomic_numbers=elements,
        correlation=int(cfg["correlation"]),
        gate=torch.nn.functional.silu,
    )
    if compiled:
        from mace.tools.compile import prepare

        return prepare(modules.MACE)(**kw)
    return modules.MACE(**kw)


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


def _cycle(loader, set_epoch: bool):
    """``loader``'s batches epoch after epoch (a plan loader gets each epoch's number)."""
    epoch = 0
    while True:
        if set_epoch:
            loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def _dict_nbytes(batch: dict) -> int:
    import torch

    return sum(
        v.element_size() * v.nelement() for v in batch.values() if isinstance(v, torch.Tensor)
    )


class MaceRun(_Run):
    """One MACE run with `_Run`'s timing and record; see the module docstring."""

    def __init__(self, spec, cfg: BenchConfig, data: MaceData) -> None:
        import torch
        from mace.modules.loss import WeightedEnergyForcesLoss
        from mace.tools import torch_geometric

        self.spec, self.cfg, self.data = spec, cfg, data
        self.device = torch.device(cfg.device)
        self.cuda = self.device.type == "cuda"
        self.is_pyg_model = False
        self.padded = spec.strategy not in MACE_BASELINES
        options = cfg.model_options.get("mace", {})
        self.model = small_mace(
            data, compiled=spec.compiled, seed=cfg.seed + spec.repeat, **options
        ).to(self.device)
        self.compile_log = CompileLog()
        if spec.compiled:
            backend = self.compile_log.backend(cfg.compile_backend)
            self.fn = _compile(self.model, dynamic=False if self.padded else None, backend=backend)
        else:
            self.fn = self.model
        self.step_mode, self.feed_mode = step_mode(cfg, self.padded), feed_mode(cfg, self.padded)
        captured = self.step_mode == "captured"
        self.opt = optimizer(self.model.parameters(), cfg.lr, captured and self.cuda)
        self.budget = None
        self.train_step = None
        if self.padded:
            import graphbatch.atomistic as ga

            from ..torch import loader

            opts = _padded_options(spec, cfg, data)
            budget = opts.get("budget")
            if budget is not None:
                self.budget = [int(budget.n_node), int(budget.n_edge), int(budget.n_graph)]
            if data.store is not None and cfg.num_workers > 0:  # read in the workers
                ld_store = _store_loader(spec, cfg, data, preset=_store_preset(data))
                self.batches = _cycle(ld_store, set_epoch=True)
            elif data.store is not None:
                self.batches = _mace_store_batches(spec, cfg, data, opts)
            else:
                ld = loader(
                    data.train,
                    strategy=spec.strategy,
                    sizes=data.train_sizes,
                    batch_size=spec.batch_size,
                    seed=cfg.seed + spec.repeat,
                    preset=ga.mace(r_max=data.r_max),
                    dataloader_kwargs=dict(
                        num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0
                    ),
                    **opts,
                )
                self.batches = _cycle(ld, set_epoch=True)
            self.loss_fn: Callable[..., Any] | None = None
            if captured:
                self.train_step = make_train_step(
                    self.model, _padded_mace_loss, self.opt, self._forward
                )
        else:
            gen = torch.Generator().manual_seed(cfg.seed + spec.repeat)
            # mace's loader takes any sequence of graphs (its annotation says Dataset)
            pyg_ld = torch_geometric.dataloader.DataLoader(
                data.train,  # type: ignore[arg-type]
                batch_size=spec.batch_size,
                shuffle=True,
                drop_last=False,
                generator=gen,
                num_workers=cfg.num_workers,
                persistent_workers=cfg.num_workers > 0,
            )
            self.batches = _cycle(pyg_ld, set_epoch=False)
            self.loss_fn = WeightedEnergyForcesLoss(ENERGY_WEIGHT, FORCES_WEIGHT)
        if self.feed_mode == "device":
            self.batches = device_fed(self.batches, self.device)
        elif cfg.prefetch > 0:
            self.batches = _prefetched(self.batches, cfg.prefetch, self.cuda)
        _reset_counters(self, cfg.steps)
        self.train_loss: list[float] = []

    def _forward(self, model, d: dict) -> Any:
        """The model on a padded batch, positions a fresh leaf (forces are their gradient)."""
        d = dict(d)
        d["positions"] = d["positions"].detach().requires_grad_(True)
        return self.fn(d, training=True)

    def step(self, k: int) -> None:
        import torch
        from torch._dynamo.utils import counters

        t0 = time.perf_counter()
        b = next(self.batches)
        if self.padded:
            d = {
                key: v.to(self.device) if isinstance(v, torch.Tensor) else v for key, v in b.items()
            }
        else:
            b = b.to(self.device)
            d = b.to_dict()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t1 = time.perf_counter()
        before = counters["stats"]["unique_graphs"] + new_captures(self.train_step)
        loss = self.train_step(d) if self.train_step is not None else self._loop_step(b, d)
        self.train_loss.append(float(loss.detach()))
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t2 = time.perf_counter()
        n_node, n_edge = int(d["positions"].shape[0]), int(d["edge_index"].shape[1])
        if self.padded:
            real = (
                int(d["graph_mask"].sum()),
                int(d["node_mask"].sum()),
                int(d["edge_mask"].sum()),
            )
            shape = (n_node, n_edge, int(d["graph_mask"].shape[0]))
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
            nbytes=_dict_nbytes(d),
        )
        _evaluate_on_schedule(self, k, lambda: _evaluate_mace(self.model, self.data, self.device))

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


def load_mace_store_data(
    path: str, *, subset: int | None, seed: int, test_fraction: float = 0.1
) -> MaceData:
    """The first ``subset`` structures of an atomistic store (``graphbatch data build
    extxyz``), split at random (``seed``): the padded runs read the training graphs from the
    store; MACE's baselines and the test set get MACE's own ``AtomicData.from_config`` of the
    same structures (its own neighbour list); ``r_max`` is the store's cutoff (so both train
    on the same edges). Targets: the stored energy (eV) and forces
    (eV/Å), atomic energies E0 fitted by least squares on the training energies (as MACE's
    ``compute_average_E0s``); elements: the store's."""
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from ..datasets import GraphStore

    store = GraphStore(path)
    missing = {"positions", "atomic_numbers", "cell", "pbc", "energy", "forces"} - set(store.fields)
    if missing:
        raise InputError(
            f"store {path!r} lacks the fields {sorted(missing)} MACE's bench needs "
            "(build it with `graphbatch data build extxyz FILE --cutoff R`)"
        )
    if "cutoff_angstrom" not in store.meta:
        raise InputError(f"store {path!r} does not state its cutoff (meta cutoff_angstrom)")
    r_max = float(store.meta["cutoff_angstrom"])
    g = len(store) if subset is None else min(int(subset), len(store))
    if g < 10:
        raise InputError(f"subset={subset} gives {g} structures; the bench needs >= 10")
    rng = np.random.default_rng(seed)
    order = rng.permutation(g)
    n_test = max(1, int(round(test_fraction * g)))
    test_idx, train_idx = np.sort(order[:n_test]), np.sort(order[n_test:])
    elements = tuple(int(z) for z in store.meta["elements"])
    table = AtomicNumberTable(list(elements))
    packed = store.packed()
    no = store.node_offsets
    energy = store.graph_field("energy")
    counts = np.zeros((len(train_idx), len(elements)))
    col = {z: k for k, z in enumerate(elements)}
    for r, i in enumerate(train_idx.tolist()):
        z = packed.node["atomic_numbers"][no[i] : no[i + 1]]
        for zz, c in zip(*np.unique(z, return_counts=True), strict=True):
            counts[r, col[int(zz)]] = c
    e0 = np.linalg.lstsq(counts, energy[train_idx], rcond=None)[0]

    def atomic(i: int):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(
            atomic_numbers=packed.node["atomic_numbers"][a:b].astype(np.int64),
            positions=np.array(packed.node["positions"][a:b]),
            pbc=tuple(bool(p) for p in store.graph_field("pbc")[i]),
            cell=np.array(store.graph_field("cell")[i]),
            properties={"energy": float(energy[i]), "forces": np.array(packed.node["forces"][a:b])},
            property_weights={},
        )
        return AtomicData.from_config(conf, z_table=table, cutoff=float(r_max))

    train = [atomic(int(i)) for i in train_idx]
    test = [atomic(int(i)) for i in test_idx]
    sizes = store.graph_sizes().subset(train_idx)
    nn, ne = sizes.n_node, sizes.n_edge
    return MaceData(
        train,
        test,
        sizes,
        1.0,
        "eV",
        g,
        float(ne.sum() / max(nn.sum(), 1)),
        float(r_max),
        store=store,
        elements=elements,
        atomic_energies=e0,
        train_index=train_idx.astype(np.int64),
    )


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
