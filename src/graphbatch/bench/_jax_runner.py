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
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import InputError
from ..recipes import model_kwargs
from ..recipes.jax import reference_model, train_step
from ._config import JAX_BASELINES, BenchConfig, RunSpec, bench_budget
from ._jax_data import (
    JaxBenchData,
    baseline_batches,
    jraph_pad,
    load_jax_bench_data,
    loader_batches,
    masked,
)
from ._loop import BenchRun, RunFacts, StepSizes, drive_runs

__all__ = [
    "JaxBenchData",
    "build_jax_model",
    "compile_seconds",
    "jax_targets",
    "jax_train_step",
    "load_jax_bench_data",
    "plan_jax_runs",
    "run_jax_bench",
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


# --------------------------------------------------------------------------- models
def build_jax_model(spec: RunSpec, cfg: BenchConfig):
    """The Flax model of ``spec`` with the bench's options (`graphbatch.recipes.jax`)."""
    return reference_model(spec.model, cutoff=cfg.cutoff, options=cfg.model_options.get(spec.model))


def jax_train_step(model, opt) -> Callable:
    """The bench's train step of a Flax model ``model`` with the optax optimizer ``opt``:
    ``(params, opt_state, pg) -> (params, opt_state, loss)``, masked MSE of the prediction
    against ``pg.graphs.globals["y"][:, 0]`` over the real graphs (not jitted)."""
    return train_step(model, opt)


def _model_key(spec: RunSpec, cfg: BenchConfig) -> str:
    """The model's name and options: runs with the same key share a jitted init and predict."""
    options = model_kwargs(spec.model, cutoff=cfg.cutoff, options=cfg.model_options.get(spec.model))
    return f"{spec.model}:{sorted(options.items())}"


_INITS: dict[str, Callable] = {}


def _initial_params(model, key: str, graph, seed: int):
    """``model.init`` with ``PRNGKey(seed)``: the same initial weights for every strategy of a
    repeat (as the torch bench); one jitted init per model configuration (op-by-op init costs
    a compilation per primitive)."""
    import jax

    from ..jax.models import graph_inputs

    inputs = graph_inputs(masked(jraph_pad(graph)))
    init = _INITS.get(key)
    if init is None:
        init = _INITS[key] = jax.jit(model.init, static_argnames="num_graphs")
    return init(jax.random.PRNGKey(seed), **inputs)


def _warm_up(spec: RunSpec, cfg: BenchConfig, data) -> None:
    """Compile and run the model's train step once on one padded graph, untimed, before any
    run: JAX's one-time costs of a process's first compilation of a model (lowering rules,
    tracing caches) would otherwise fall on whichever strategy steps first."""
    import jax
    import optax

    model = build_jax_model(spec, cfg)
    opt = optax.adam(cfg.lr)
    params = _initial_params(model, _model_key(spec, cfg), data.train[0], cfg.seed)
    pg = jax.device_put(masked(jraph_pad(data.train[0])))
    jax.block_until_ready(jax.jit(train_step(model, opt))(params, opt.init(params), pg))


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


class _JaxRun(BenchRun):
    """One JAX run on the shared loop (`BenchRun`): its own jitted step (its cache size is its
    compile count), batches from `graphbatch.jax.loader` (a prefetch thread collates and
    transfers ahead) or a jraph baseline (batched and transferred in the training thread)."""

    def __init__(self, spec: RunSpec, cfg: BenchConfig, data, evaluator: _Evaluator) -> None:
        import jax
        import optax

        self.spec, self.cfg, self.data, self.evaluator = spec, cfg, data, evaluator
        self.model = build_jax_model(spec, cfg)
        self.model_key = _model_key(spec, cfg)
        seed = cfg.seed + spec.repeat
        budget, self.batches = self._batches(seed)
        self.budget = (
            None
            if budget is None
            else [int(budget.n_node), int(budget.n_edge), int(budget.n_graph)]
        )
        self.opt = optax.adam(cfg.lr)
        # this run's own jitted step and cache: its compile count
        self.step_fn = jax.jit(train_step(self.model, self.opt))
        self.params = _initial_params(self.model, self.model_key, data.train[0], seed)
        self.opt_state = self.opt.init(self.params)
        self.unpadded = spec.strategy == "unpadded"
        self.reset_counters()
        self.compile_s = np.zeros(cfg.steps)
        self.warmup_ms = np.zeros(cfg.steps)  # unpadded only: the untimed first call of each batch
        self._compile_s0 = 0.0

    def _batches(self, seed: int) -> tuple[Any, Any]:
        """(the run's budget or None, its batches)."""
        from ..planners import get_strategy

        spec, cfg, data = self.spec, self.cfg, self.data
        if spec.strategy in JAX_BASELINES:
            budget = None
            if spec.strategy == "jraph-dynamic":
                budget = bench_budget(cfg, data.train_sizes, spec.batch_size, "dynamic")
            return budget, baseline_batches(spec.strategy, data, spec.batch_size, seed, budget)
        options = dict(cfg.strategy_options.get(spec.strategy, {}))
        budget = None
        if get_strategy(spec.strategy).uses_budget and "budget" not in options:
            budget = bench_budget(cfg, data.train_sizes, spec.batch_size, spec.strategy)
            options["budget"] = budget
        return budget, loader_batches(spec, cfg, data, options)

    # ------------------------------------------------------------------ BenchRun's hooks
    def next_batch(self) -> Any:
        import jax

        pg = next(self.batches)
        if not isinstance(jax.tree_util.tree_leaves(pg)[0], jax.Array):
            pg = jax.device_put(pg)  # baselines: the transfer is part of batching
        jax.block_until_ready(pg)
        return pg

    def compile_count(self) -> int:
        # jax.jit's compile cache size: a private API the type stubs do not declare
        return int(self.step_fn._cache_size())  # type: ignore[attr-defined]

    def before_update(self, pg: Any, k: int) -> None:
        """Start the compile clock; ``unpadded``: compile and run once apart (untimed), so the
        update time is the rerun's."""
        import jax

        self._compile_s0 = compile_seconds()
        if self.unpadded:
            t0 = time.perf_counter()
            jax.block_until_ready(self.step_fn(self.params, self.opt_state, pg))
            self.warmup_ms[k] = (time.perf_counter() - t0) * 1e3

    def update(self, pg: Any) -> None:
        import jax

        params, opt_state, loss = self.step_fn(self.params, self.opt_state, pg)
        jax.block_until_ready(loss)
        self.params, self.opt_state = params, opt_state

    def after_update(self, k: int) -> None:
        self.compile_s[k] = compile_seconds() - self._compile_s0

    def step_sizes(self, pg: Any) -> StepSizes:
        import jax

        nm, em, gm = np.asarray(pg.node_mask), np.asarray(pg.edge_mask), np.asarray(pg.graph_mask)
        return StepSizes(
            real=(int(gm.sum()), int(nm.sum()), int(em.sum())),
            padded=(nm.shape[0], em.shape[0]),
            shape=(nm.shape[0], em.shape[0], gm.shape[0]),
            nbytes=sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(pg)),
        )

    def evaluate(self) -> tuple[float, float]:
        return self.evaluator(self.model, self.model_key, self.params)

    # ------------------------------------------------------------------ the record
    def steady_steps(self, compiling: np.ndarray) -> np.ndarray:
        if self.unpadded:  # every step was timed after its own warm-up call
            return np.ones(len(compiling), dtype=bool)
        return super().steady_steps(compiling)

    def facts(self, compiling: np.ndarray, steady: np.ndarray) -> RunFacts:
        import jax

        from ..jax.models import count_parameters

        return RunFacts(
            compiled=True,
            device=jax.devices()[0].platform,
            num_workers=0,
            prefetch=self.cfg.prefetch if self.spec.strategy not in JAX_BASELINES else 0,
            sharing_strategy=None,
            params=count_parameters(self.params),
            model_impl="graphbatch-flax",
            compile_mode="jax.jit",
            compile_s=float(self.compile_s.sum()),
            distinct_shapes=len(self.shapes),
            peak_mem_bytes=int(self.peak_rss),
            peak_mem_kind="process_rss",
        )

    def leading_fields(self) -> dict[str, Any]:
        return {"framework": "jax"}

    def overhead_ms(self) -> float:
        return float(self.warmup_ms.sum())

    def timing_extra_fields(self, steady: np.ndarray) -> dict[str, Any]:
        """The input wait: the share of step time spent waiting for the batch (of the steady
        steps' total; median of the per-step shares) and each step's wait in ms."""
        wait, step_ms = self.batching_ms, self.batching_ms + self.update_ms
        return {
            "input_wait_fraction": float(wait[steady].sum() / step_ms[steady].sum()),
            "input_wait_fraction_median": float(np.median(wait[steady] / step_ms[steady])),
            "input_wait_ms_steps": [round(float(x), 4) for x in wait],
        }


def run_jax_bench(cfg: BenchConfig, *, progress: bool = True, data=None) -> list[dict[str, Any]]:
    """Every run of ``cfg`` (``framework="jax"``); interleaved per repeat like `run_bench`."""
    from tqdm.auto import tqdm

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
    bar = tqdm(total=len(runs) * cfg.steps, unit="step", disable=not progress)
    try:
        return drive_runs(
            runs, cfg, lambda spec: _JaxRun(spec, cfg, data, evaluator), bar=bar, label=_describe
        )
    finally:
        bar.close()


def _describe(spec: RunSpec) -> str:
    return f"jax {spec.model} {spec.strategy} b={spec.batch_size} r={spec.repeat}"


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
