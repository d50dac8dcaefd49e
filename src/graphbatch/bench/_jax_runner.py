"""``graphbatch bench --framework jax``: the torch bench's runs, records and statistics with
`graphbatch.jax.loader` batches and the Flax models of `graphbatch.jax.models`.

Per step: batching time = input wait (the training thread's wait for the next device-resident
batch: ``next()`` plus ``block_until_ready``; the loader's prefetch thread collates and
transfers ahead, the jraph baselines batch and transfer in the training thread), update time
(jitted forward, backward and Adam update, ``block_until_ready``), new compilations of the
run's own jitted step (``jitted._cache_size()``) and their seconds (JAX's
``/jax/core/compile/*`` duration events while the step ran). Records carry the torch bench's
keys plus ``framework: "jax"``. Each model's train step is compiled once untimed before the
runs, so no run pays the process's first-compilation costs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np

from .._errors import InputError
from ..analysis import step_list_fields, step_timing_fields
from ._config import JAX_BASELINES, BenchConfig
from ._run import (
    RunSpec,
    _count_step,
    _evaluate_on_schedule,
    _reset_counters,
    _StepCounters,
    bench_budget,
)

__all__ = [
    "JaxBenchData",
    "build_jax_model",
    "jax_train_step",
    "load_jax_bench_data",
    "plan_jax_runs",
    "run_jax_bench",
    "compile_seconds",
]


# --------------------------------------------------------------------------- compile events
class _CompileClock:
    """Seconds JAX spends tracing, lowering and compiling, summed per thread, from
    ``jax.monitoring`` duration events (registered once per process)."""

    EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self) -> None:
        self._local = threading.local()
        self._registered = False

    def ensure(self) -> None:
        if not self._registered:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(self._listen)
            self._registered = True

    def _listen(self, event: str, duration_secs: float, **_: str | int) -> None:
        if event in self.EVENTS:
            self._local.total = getattr(self._local, "total", 0.0) + float(duration_secs)

    def total(self) -> float:
        return getattr(self._local, "total", 0.0)


_CLOCK = _CompileClock()


def compile_seconds() -> float:
    """Seconds this thread has spent in JAX tracing/lowering/compiling so far (monotone)."""
    _CLOCK.ensure()
    return _CLOCK.total()


# --------------------------------------------------------------------------- data
class JaxBenchData:
    """Train/test lists of single-graph ``jraph.GraphsTuple`` (``nodes = {"z", "pos"}``,
    ``globals = {"y": [1, 1]}``), train sizes, target scale and unit."""

    def __init__(self, train, test, train_sizes, scale: float, unit: str, num_graphs: int):
        self.train, self.test, self.train_sizes = train, test, train_sizes
        self.scale, self.unit, self.num_graphs = scale, unit, num_graphs


def load_jax_bench_data(
    dataset: str = "qm9", *, subset: int | None = 2000, cutoff: float = 6.0, seed: int = 0
) -> JaxBenchData:
    """The torch bench's split and target (`load_bench_arrays`) as ``GraphsTuple`` lists."""
    import jraph

    from ._data import load_bench_arrays

    a = load_bench_arrays(dataset, subset=subset, cutoff=cutoff, seed=seed)
    ga = a.graphs
    z = ga.node["z"].astype(np.int32)
    pos = np.ascontiguousarray(ga.node["pos"], dtype=np.float32)
    ei = ga.edge_index.astype(np.int32)
    y = a.target.astype(np.float32)
    no, eo = ga.node_offsets, ga.edge_offsets

    def graph(i: int):
        p, q, r, s = int(no[i]), int(no[i + 1]), int(eo[i]), int(eo[i + 1])
        return jraph.GraphsTuple(
            n_node=np.array([q - p], np.int32),
            n_edge=np.array([s - r], np.int32),
            nodes={"z": z[p:q], "pos": pos[p:q]},
            edges={},
            globals={"y": y[i : i + 1, None]},
            senders=ei[0, r:s],
            receivers=ei[1, r:s],
        )

    train = [graph(int(i)) for i in a.train_idx]
    test = [graph(int(i)) for i in a.test_idx]
    return JaxBenchData(train, test, ga.sizes().subset(a.train_idx), a.scale, a.unit, len(ga))


# --------------------------------------------------------------------------- batches
def _shuffled(n: int, seed: int) -> Iterator[int]:
    """Dataset indices, a fresh permutation per epoch from ``(seed, epoch)``, forever."""
    epoch = 0
    while True:
        yield from np.random.default_rng([seed, epoch]).permutation(n).tolist()
        epoch += 1


def _masked(graphs, index=None):
    """`PaddedGraphs` of a ``jraph.pad_with_graphs`` result (masks from jraph's helpers)."""
    import jraph

    from ..jax import PaddedGraphs

    g_mask = np.asarray(jraph.get_graph_padding_mask(graphs))
    gi = np.full(g_mask.shape[0], -1, np.int64) if index is None else index
    return PaddedGraphs(
        graphs,
        np.asarray(jraph.get_node_padding_mask(graphs)),
        np.asarray(jraph.get_edge_padding_mask(graphs)),
        g_mask,
        gi,
    )


def _jraph_dynamic(data, budget, seed: int) -> Generator[Any, None, None]:
    """``jraph.dynamically_batch`` over a shuffled stream, to the dynamic strategy's budget."""
    import jraph

    stream = (data.train[i] for i in _shuffled(len(data.train), seed))
    for g in jraph.dynamically_batch(stream, budget.n_node, budget.n_edge, budget.n_graph):
        yield _masked(g)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _jraph_pad64(data, batch_size: int, seed: int) -> Generator[Any, None, None]:
    """The common recipe: ``batch_size - 1`` graphs, ``jraph.batch_np``, then
    ``jraph.pad_with_graphs`` to the next multiples of 64 nodes and edges."""
    import jraph

    order = _shuffled(len(data.train), seed)
    while True:
        graphs = [data.train[next(order)] for _ in range(batch_size - 1)]
        b = jraph.batch_np(graphs)
        n = _round_up(int(b.n_node.sum()) + 1, 64)
        e = _round_up(int(b.n_edge.sum()), 64)
        yield _masked(jraph.pad_with_graphs(b, n, e, batch_size))


def _unpadded(data, batch_size: int, seed: int) -> Generator[Any, None, None]:
    """Exact-size batches of ``batch_size`` graphs (no padding graph, all-true masks)."""
    import jraph

    from ..jax import PaddedGraphs

    order = _shuffled(len(data.train), seed)
    while True:
        b = jraph.batch_np([data.train[next(order)] for _ in range(batch_size)])
        n, e, g = int(b.n_node.sum()), int(b.n_edge.sum()), batch_size
        yield PaddedGraphs(
            b, np.ones(n, bool), np.ones(e, bool), np.ones(g, bool), np.zeros(g, np.int64)
        )


def _loader_batches(spec: RunSpec, cfg: BenchConfig, data, options) -> Generator[Any, None, None]:
    from ..jax import loader

    ld = loader(
        data.train,
        strategy=spec.strategy,
        sizes=data.train_sizes,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        prefetch=max(cfg.prefetch, 0),
        **options,
    )
    while True:  # the loader advances its own epoch after each pass
        yield from ld


# --------------------------------------------------------------------------- one run
def plan_jax_runs(cfg: BenchConfig) -> list[RunSpec]:
    """Repeat-major runs; every JAX run is jitted (``compiled=True``). For ``unpadded`` every
    batch is a new shape: its step is called once to compile (counted in ``compiles``,
    ``compile_s`` and the compilation-included ``graphs_per_s``) and timed on a second call
    (``update_ms``, the steady-state figures), which gives the padding-cost reference."""
    return [
        RunSpec(m, s, int(b), r, True)
        for r in range(cfg.repeats)
        for m in cfg.models
        for b in cfg.batch_sizes
        for s in cfg.strategies
    ]


def _model_kwargs(spec: RunSpec, cfg: BenchConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"cutoff": cfg.cutoff}
    if spec.model == "schnet":
        kwargs["pair_edges"] = True  # QM9 radius graphs: every edge has its reverse
    kwargs.update(cfg.model_options.get(spec.model, {}))
    return kwargs


class _Evaluator:
    """Test MAE/RMSE with one jitted predict per model (fixed eval shape, compiled once)."""

    def __init__(self, data, cfg: BenchConfig) -> None:
        from ..jax import loader

        self.data = data
        ld = loader(
            data.test, strategy="static-constant", batch_size=129, shuffle=False, prefetch=0
        )
        self.batches = list(ld)
        self._fns: dict[str, Callable] = {}

    def __call__(self, model, key: str, params) -> tuple[float, float]:
        import jax
        import jax.numpy as jnp

        from ..jax.models import graph_inputs

        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = jax.jit(lambda p, pg: model.apply(p, **graph_inputs(pg)))
        err = []
        for pg in self.batches:
            pred = fn(params, pg)
            y = pg.graphs.globals["y"][:, 0]
            err.append(np.asarray(jnp.where(pg.graph_mask, pred - y, jnp.nan)))
        e = np.concatenate(err)
        e = e[~np.isnan(e)].astype(np.float64) * self.data.scale
        return float(np.abs(e).mean()), float(np.sqrt((e * e).mean()))


class _JaxRun(_StepCounters):
    def __init__(self, spec: RunSpec, cfg: BenchConfig, data, evaluator: _Evaluator) -> None:
        import jax
        import optax

        from ..planners import get_strategy

        self.spec, self.cfg, self.data, self.evaluator = spec, cfg, data, evaluator
        self.model = build_jax_model(spec, cfg)
        self.model_key = f"{spec.model}:{sorted(_model_kwargs(spec, cfg).items())}"
        seed = cfg.seed + spec.repeat
        self.budget = None
        if spec.strategy in JAX_BASELINES:
            if spec.strategy == "jraph-dynamic":
                self.budget = bench_budget(cfg, data.train_sizes, spec.batch_size, "dynamic")
                batches = _jraph_dynamic(data, self.budget, seed)
            elif spec.strategy == "jraph-pad64":
                batches = _jraph_pad64(data, spec.batch_size, seed)
            else:
                batches = _unpadded(data, spec.batch_size, seed)
            self.batches = batches  # users' recipes run in the training thread
        else:
            options = dict(cfg.strategy_options.get(spec.strategy, {}))
            if get_strategy(spec.strategy).uses_budget and "budget" not in options:
                self.budget = bench_budget(cfg, data.train_sizes, spec.batch_size, spec.strategy)
                options["budget"] = self.budget
            self.batches = _loader_batches(spec, cfg, data, options)
        model = self.model
        self.opt = optax.adam(cfg.lr)
        # this run's own jitted step and cache: its compile count
        self.step_fn = jax.jit(_train_step(model, self.opt))
        self.params = _initial_params(model, self.model_key, data.train[0], seed)
        self.opt_state = self.opt.init(self.params)
        self.unpadded = spec.strategy == "unpadded"
        n = cfg.steps
        _reset_counters(self, n)
        self.compile_s = np.zeros(n)
        self.warmup_ms = np.zeros(n)  # unpadded only: the untimed first call of each batch

    def step(self, k: int) -> None:
        import jax

        t0 = time.perf_counter()
        pg = next(self.batches)
        if not isinstance(jax.tree_util.tree_leaves(pg)[0], jax.Array):
            pg = jax.device_put(pg)  # baselines: the transfer is part of batching
        jax.block_until_ready(pg)
        t1 = time.perf_counter()
        # jax.jit's compile cache size: a private API the type stubs do not declare
        before, c0 = self.step_fn._cache_size(), compile_seconds()  # type: ignore[attr-defined]
        if self.unpadded:  # compile and run once apart; the update time is the rerun's
            jax.block_until_ready(self.step_fn(self.params, self.opt_state, pg))
            tw = time.perf_counter()
            self.warmup_ms[k] = (tw - t1) * 1e3
        else:
            tw = t1
        params, opt_state, loss = self.step_fn(self.params, self.opt_state, pg)
        jax.block_until_ready(loss)
        t2 = time.perf_counter()
        self.params, self.opt_state = params, opt_state
        self.compile_s[k] = compile_seconds() - c0
        nm, em, gm = np.asarray(pg.node_mask), np.asarray(pg.edge_mask), np.asarray(pg.graph_mask)
        _count_step(
            self,
            k,
            batching_ms=(t1 - t0) * 1e3,
            update_ms=(t2 - tw) * 1e3,
            new_compiles=self.step_fn._cache_size() - before,  # type: ignore[attr-defined]
            real=(int(gm.sum()), int(nm.sum()), int(em.sum())),
            padded=(nm.shape[0], em.shape[0]),
            shape=(nm.shape[0], em.shape[0], gm.shape[0]),
            nbytes=sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(pg)),
        )
        _evaluate_on_schedule(
            self, k, lambda: self.evaluator(self.model, self.model_key, self.params)
        )

    def record(self, interleaved: bool) -> dict[str, Any]:
        import jax

        from ..jax.models import count_parameters

        spec, cfg, n = self.spec, self.cfg, self.cfg.steps
        self.batches.close()
        batching_ms, update_ms, real_graphs = self.batching_ms, self.update_ms, self.real_graphs
        step_ms = batching_ms + update_ms
        compiling = self.new_compiles > 0
        steady = ~compiling if (~compiling).any() else np.ones(n, dtype=bool)
        if self.unpadded:  # every step was timed after its own warm-up call
            steady = np.ones(n, dtype=bool)
        graphs_seen = int(real_graphs.sum())
        b = self.budget
        return {
            "framework": "jax",
            "model": spec.model,
            "strategy": spec.strategy,
            "batch_size": spec.batch_size,
            "repeat": spec.repeat,
            "compiled": True,
            "device": jax.devices()[0].platform,
            "num_workers": 0,
            "prefetch": cfg.prefetch if spec.strategy not in JAX_BASELINES else 0,
            "sharing_strategy": None,
            "budget": None if b is None else [int(b.n_node), int(b.n_edge), int(b.n_graph)],
            "graph_cap": cfg.graph_cap_for(spec.strategy) if b is not None else None,
            "interleaved": interleaved,
            "steps": n,
            "params": count_parameters(self.params),
            "model_impl": "graphbatch-flax",
            "compile_mode": "jax.jit",
            "compiles": int(self.new_compiles.sum()),
            "compile_s": float(self.compile_s.sum()),
            "distinct_shapes": len(self.shapes),
            **step_timing_fields(
                batching_ms, update_ms, real_graphs, steady, overhead_ms=float(self.warmup_ms.sum())
            ),
            "input_wait_fraction": float(batching_ms[steady].sum() / step_ms[steady].sum()),
            "input_wait_fraction_median": float(np.median(batching_ms[steady] / step_ms[steady])),
            "input_wait_ms_steps": [round(float(x), 4) for x in batching_ms],
            "real_graphs": graphs_seen,
            "node_efficiency": float(self.real_nodes / self.pad_nodes) if self.pad_nodes else 1.0,
            "edge_efficiency": float(self.real_edges / self.pad_edges) if self.pad_edges else 1.0,
            "peak_mem_bytes": int(self.peak_rss),
            "peak_mem_kind": "process_rss" + ("_process_wide" if interleaved else ""),
            "batch_bytes_max": int(self.batch_bytes),
            "test_mae": self.maes[-1],
            "test_rmse": self.rmses[-1],
            "unit": self.data.unit,
            "eval_steps": self.eval_steps,
            "test_mae_curve": self.maes,
            "test_rmse_curve": self.rmses,
            **step_list_fields(batching_ms, update_ms, real_graphs, compiling),
        }


def _train_step(model, opt) -> Callable:
    """``(params, opt_state, pg) -> (params, opt_state, loss)``: masked MSE over the real
    graphs, gradient, optimizer update (not jitted: each run jits its own)."""
    import jax
    import jax.numpy as jnp
    import optax

    from ..jax.models import graph_inputs

    def loss_fn(params, pg):
        pred = model.apply(params, **graph_inputs(pg))
        err = jnp.where(pg.graph_mask, (pred - pg.graphs.globals["y"][:, 0]) ** 2, 0.0)
        return err.sum() / jnp.maximum(pg.graph_mask.sum(), 1)

    def train_step(params, opt_state, pg):
        loss, grads = jax.value_and_grad(loss_fn)(params, pg)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def jax_train_step(model, opt) -> Callable:
    """The bench's train step of a Flax model ``model`` with the optax optimizer ``opt``:
    ``(params, opt_state, pg) -> (params, opt_state, loss)``, masked MSE of the prediction
    against ``pg.graphs.globals["y"][:, 0]`` over the real graphs (not jitted)."""
    return _train_step(model, opt)


def _warm_up(spec: RunSpec, cfg: BenchConfig, data) -> None:
    """Compile and run the model's train step once on one padded graph, untimed, before any
    run: JAX's one-time costs of a process's first compilation of a model (lowering rules,
    tracing caches) would otherwise fall on whichever strategy steps first."""
    import jax
    import optax

    model = build_jax_model(spec, cfg)
    opt = optax.adam(cfg.lr)
    key = f"{spec.model}:{sorted(_model_kwargs(spec, cfg).items())}"
    params = _initial_params(model, key, data.train[0], cfg.seed)
    pg = jax.device_put(_masked(jraph_pad(data.train[0])))
    jax.block_until_ready(jax.jit(_train_step(model, opt))(params, opt.init(params), pg))


def build_jax_model(spec: RunSpec, cfg: BenchConfig):
    """The Flax model of ``spec`` with the bench's options."""
    from ..jax.models import build_model

    return build_model(spec.model, **_model_kwargs(spec, cfg))


_INITS: dict[str, Callable] = {}


def _initial_params(model, key: str, graph, seed: int):
    """``model.init`` with ``PRNGKey(seed)``: the same initial weights for every strategy of a
    repeat (as the torch bench); one jitted init per model configuration (op-by-op init costs
    a compilation per primitive)."""
    import jax

    from ..jax.models import graph_inputs

    inputs = graph_inputs(_masked(jraph_pad(graph)))
    init = _INITS.get(key)
    if init is None:
        init = _INITS[key] = jax.jit(model.init, static_argnames="num_graphs")
    return init(jax.random.PRNGKey(seed), **inputs)


def jraph_pad(graph):
    """One graph padded by one node and one graph slot (model initialisation input)."""
    import jraph

    return jraph.pad_with_graphs(graph, int(graph.n_node[0]) + 1, int(graph.n_edge[0]), 2)


def run_jax_bench(cfg: BenchConfig, *, progress: bool = True, data=None) -> list[dict[str, Any]]:
    """Every run of ``cfg`` (``framework="jax"``); interleaved per repeat like `run_bench`."""
    cfg.validate()
    if cfg.framework != "jax":
        raise InputError(f"run_jax_bench needs framework='jax', got {cfg.framework!r}")
    compile_seconds()  # register the compile-event listener before anything compiles
    if data is None:
        data = load_jax_bench_data(cfg.dataset, subset=cfg.subset, cutoff=cfg.cutoff, seed=cfg.seed)
    evaluator = _Evaluator(data, cfg)
    runs = plan_jax_runs(cfg)
    for m in cfg.models:
        _warm_up(next(r for r in runs if r.model == m), cfg, data)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(runs) * cfg.steps, unit="step", disable=not progress)
    records: list[dict[str, Any]] = []
    try:
        if not cfg.interleave:
            for spec in runs:
                run = _JaxRun(spec, cfg, data, evaluator)
                for k in range(cfg.steps):
                    run.step(k)
                    bar.update(1)
                records.append(run.record(interleaved=False))
        else:
            for r in range(cfg.repeats):
                group = [_JaxRun(s, cfg, data, evaluator) for s in runs if s.repeat == r]
                for k in range(cfg.steps):
                    for run in group:
                        bar.set_description(
                            f"jax {run.spec.model} {run.spec.strategy} "
                            f"b={run.spec.batch_size} r={r}"
                        )
                        run.step(k)
                        bar.update(1)
                records.extend(run.record(interleaved=True) for run in group)
                del group
    finally:
        bar.close()
    return records


def jax_targets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, batch size), medians over repeats: compilations; padding cost (a strategy's
    update time per real graph over ``unpadded``'s); real graphs/s of ``pack-lpf`` over
    ``jraph-dynamic`` and over ``jraph-pad64`` (compilation included), with the input wait."""
    from ._report import summarize

    by: dict[tuple, dict[str, dict]] = {}
    for r in summarize([x for x in records if x.get("framework") == "jax"]):
        by.setdefault((r["model"], r["batch_size"]), {})[r["strategy"]] = r
    waits: dict[tuple, list] = {}
    for x in records:
        if x.get("framework") == "jax":
            waits.setdefault((x["model"], x["batch_size"], x["strategy"]), []).append(
                x["input_wait_fraction"]
            )
    out = []
    for (m, b), d in sorted(by.items()):
        t: dict[str, Any] = {
            "model": m,
            "batch_size": b,
            "compiles": {k: v["compiles"] for k, v in d.items()},
            "compile_s": {k: round(v["compile_s"], 3) for k, v in d.items()},
            "input_wait_fraction": {k: float(np.median(waits[(m, b, k)])) for k in d},
        }
        if "unpadded" in d:
            base = d["unpadded"]["update_us_per_graph_median"]
            t["padding_cost"] = {
                k: v["update_us_per_graph_median"] / base
                for k, v in d.items()
                if k not in JAX_BASELINES
            }
        if "pack-lpf" in d:
            for k in ("jraph-dynamic", "jraph-pad64"):
                if k in d:
                    t[f"pack_lpf_over_{k.replace('-', '_')}"] = (
                        d["pack-lpf"]["graphs_per_s"] / d[k]["graphs_per_s"]
                    )
        out.append(t)
    return out
