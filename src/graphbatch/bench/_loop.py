"""The run loop every ``graphbatch bench`` run shares, framework-free.

`BenchRun` times one training step at a time -- the wait for the next batch (batching), the
update (forward, backward, optimizer step; the framework synchronised), the compilations it
caused -- books the step's counters, evaluates on schedule and assembles the run's record.
A framework's run (`graphbatch.bench._run._Run` for torch and MACE,
`graphbatch.bench._jax_runner._JaxRun` for JAX) supplies the pieces: its batches, its
compilation counter, its update, the sizes of a batch, its test evaluation and the facts of
its record (`RunFacts`). `drive_runs` steps a grid of runs alone or interleaved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._errors import InputError
from ..analysis import step_list_fields, step_timing_fields
from ._config import BenchConfig, RunSpec

__all__ = ["BenchRun", "RunFacts", "StepSizes", "drive_runs", "rss"]


def rss() -> int:
    """This process's resident set size in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


@dataclass(frozen=True)
class StepSizes:
    """What one step's batch held: ``real`` (graphs, nodes, edges) without padding, ``padded``
    (nodes, edges) with it, the padded ``shape`` (nodes, edges, graph slots; None: batches of
    varying size, not counted as a shape) and ``nbytes``, the bytes of its arrays."""

    real: tuple[int, int, int]
    padded: tuple[int, int]
    shape: tuple[int, int, int] | None
    nbytes: int


@dataclass(frozen=True)
class RunFacts:
    """What a framework's run states about itself in its record: whether it ``compiled``, its
    ``device``, DataLoader workers, prefetch depth and sharing strategy, parameter count, model
    implementation, compile mode, seconds compiling, distinct padded shapes (None: not
    counted), peak memory in bytes and its kind (without the ``_process_wide`` suffix)."""

    compiled: bool
    device: str
    num_workers: int
    prefetch: int
    sharing_strategy: str | None
    params: int
    model_impl: str
    compile_mode: str | None
    compile_s: float
    distinct_shapes: int | None
    peak_mem_bytes: int
    peak_mem_kind: str


class BenchRun:
    """One run of ``cfg.steps`` timed steps. `step` runs and books one step, `record`
    summarises; a subclass sets ``spec``, ``cfg``, ``data``, ``batches`` (a generator, closed by
    `record`) and ``budget`` (``[n_node, n_edge, n_graph]`` or None), calls `reset_counters`,
    and implements the hooks below."""

    spec: RunSpec
    cfg: BenchConfig
    data: Any
    batches: Generator[Any, None, None]
    budget: list[int] | None
    # the counters: per step (ms; counts) and per run
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
    #: the profiled steps' summary (`profile`), None until profiled or when not asked
    profiled: dict[str, Any] | None = None

    # ------------------------------------------------------------------ hooks
    def next_batch(self) -> Any:
        """The next batch, on the device and ready (its wait is the step's batching time)."""
        raise NotImplementedError

    def compile_count(self) -> int:
        """Compilations of this run so far (monotone)."""
        raise NotImplementedError

    def before_update(self, batch: Any, k: int) -> None:
        """Untimed work of step ``k`` between the batch and the timed update (default: none)."""

    def update(self, batch: Any) -> None:
        """One training step on ``batch``, returning when the device is done."""
        raise NotImplementedError

    def after_update(self, k: int) -> None:
        """Bookkeeping of step ``k`` after its update (default: none)."""

    def step_sizes(self, batch: Any) -> StepSizes:
        """The sizes of ``batch`` (`StepSizes`)."""
        raise NotImplementedError

    def evaluate(self) -> tuple[float, float]:
        """Test MAE and RMSE in the target's unit."""
        raise NotImplementedError

    def facts(self, compiling: np.ndarray, steady: np.ndarray) -> RunFacts:
        """The run's `RunFacts` (``compiling``/``steady``: bool masks of the steps)."""
        raise NotImplementedError

    def steady_steps(self, compiling: np.ndarray) -> np.ndarray:
        """Steps timed without a compilation (every step when each one compiled)."""
        steady = ~compiling
        return steady if steady.any() else np.ones(len(compiling), dtype=bool)

    def leading_fields(self) -> dict[str, Any]:
        """Keys that open the record (default: none; JAX: ``framework``)."""
        return {}

    def profile(self, steps: int) -> dict[str, Any]:
        """Run ``steps`` more steps under a profiler, untimed and uncounted, and return their
        summary (the record's ``profile``; `graphbatch.bench._profile.profile_steps`)."""
        raise InputError(f"--profile-steps is for torch runs, not {type(self).__name__}")

    def overhead_ms(self) -> float:
        """Untimed milliseconds that ``graphs_per_s`` counts (default: 0)."""
        return 0.0

    def timing_extra_fields(self, steady: np.ndarray) -> dict[str, Any]:
        """Keys after the timing keys (default: none)."""
        return {}

    def trailing_fields(self) -> dict[str, Any]:
        """Keys that close the record (default: none)."""
        return {}

    # ------------------------------------------------------------------ the loop
    def reset_counters(self) -> None:
        """Zero the counters for ``cfg.steps`` steps: step times in ms, real graphs and new
        compilations per step, shapes met, real/padded node and edge totals, peak RSS in
        bytes and the evaluation history."""
        steps = self.cfg.steps
        self.batching_ms = np.zeros(steps)
        self.update_ms = np.zeros(steps)
        self.real_graphs = np.zeros(steps, dtype=np.int64)
        self.new_compiles = np.zeros(steps, dtype=np.int64)
        self.shapes = set()
        self.real_nodes = self.pad_nodes = self.real_edges = self.pad_edges = 0
        self.peak_rss, self.batch_bytes = rss(), 0
        self.eval_steps = []
        self.maes = []
        self.rmses = []

    def step(self, k: int) -> None:
        """Train, time and book step ``k`` (0-based); evaluate when it is due."""
        t0 = time.perf_counter()
        batch = self.next_batch()
        t1 = time.perf_counter()
        before = self.compile_count()
        self.before_update(batch, k)
        t_update = time.perf_counter()
        self.update(batch)
        t2 = time.perf_counter()
        new_compiles = self.compile_count() - before
        self.after_update(k)
        self._count(k, (t1 - t0) * 1e3, (t2 - t_update) * 1e3, new_compiles, batch)
        if (k + 1) % self.cfg.eval_every == 0 or k + 1 == self.cfg.steps:
            mae, rmse = self.evaluate()
            self.eval_steps.append(k + 1)
            self.maes.append(mae)
            self.rmses.append(rmse)

    def _count(
        self, k: int, batching_ms: float, update_ms: float, new_compiles: int, batch: Any
    ) -> None:
        """Book step ``k``: its times (ms), new compilations, the sizes of its batch, the padded
        shape met and the batch's bytes; then the peak RSS so far."""
        sizes = self.step_sizes(batch)
        self.batching_ms[k], self.update_ms[k] = batching_ms, update_ms
        self.new_compiles[k] = new_compiles
        if sizes.shape is not None:
            self.shapes.add(sizes.shape)
        self.real_graphs[k] = sizes.real[0]
        self.real_nodes += sizes.real[1]
        self.real_edges += sizes.real[2]
        self.pad_nodes += sizes.padded[0]
        self.pad_edges += sizes.padded[1]
        self.batch_bytes = max(self.batch_bytes, sizes.nbytes)
        self.peak_rss = max(self.peak_rss, rss())

    def train_alone(self, on_step: Callable[[], None] | None = None) -> dict[str, Any]:
        """Every step of this run, then its profiled steps if asked, then its record
        (``on_step`` after each timed step)."""
        for k in range(self.cfg.steps):
            self.step(k)
            if on_step is not None:
                on_step()
        self.profile_if_asked()
        return self.record(interleaved=False)

    def profile_if_asked(self) -> None:
        """``cfg.profile_steps`` steps after the timed ones, under a profiler (`profile`)."""
        steps = int(self.cfg.profile_steps)
        self.profiled = self.profile(steps) if steps > 0 else None

    # ------------------------------------------------------------------ the record
    def record(self, interleaved: bool) -> dict[str, Any]:
        """The run's record (keys: docs/bench.md); closes its batches."""
        self.batches.close()
        spec, cfg = self.spec, self.cfg
        compiling = self.new_compiles > 0
        steady = self.steady_steps(compiling)
        facts = self.facts(compiling, steady)
        times = (self.batching_ms, self.update_ms, self.real_graphs)
        return {
            **self.leading_fields(),
            "model": spec.model,
            "strategy": spec.strategy,
            "batch_size": spec.batch_size,
            "repeat": spec.repeat,
            "compiled": facts.compiled,
            "device": facts.device,
            "num_workers": facts.num_workers,
            "prefetch": facts.prefetch,
            "sharing_strategy": facts.sharing_strategy,
            "budget": self.budget,
            "graph_cap": cfg.graph_cap_for(spec.strategy) if self.budget is not None else None,
            "interleaved": interleaved,
            "steps": cfg.steps,
            "params": facts.params,
            "model_impl": facts.model_impl,
            "compile_mode": facts.compile_mode,
            "compiles": int(self.new_compiles.sum()),
            "compile_s": facts.compile_s,
            "distinct_shapes": facts.distinct_shapes,
            **step_timing_fields(*times, steady, overhead_ms=self.overhead_ms()),
            **self.timing_extra_fields(steady),
            **self._size_and_learning_fields(facts, interleaved),
            **step_list_fields(*times, compiling),
            **self.trailing_fields(),
            **({"profile": self.profiled} if self.profiled is not None else {}),
        }

    def _size_and_learning_fields(self, facts: RunFacts, interleaved: bool) -> dict[str, Any]:
        """The record's keys of graphs seen, padding efficiency, memory and test error."""
        return {
            "real_graphs": int(self.real_graphs.sum()),
            "node_efficiency": float(self.real_nodes / self.pad_nodes) if self.pad_nodes else 1.0,
            "edge_efficiency": float(self.real_edges / self.pad_edges) if self.pad_edges else 1.0,
            "peak_mem_bytes": int(facts.peak_mem_bytes),
            "peak_mem_kind": facts.peak_mem_kind + ("_process_wide" if interleaved else ""),
            "batch_bytes_max": int(self.batch_bytes),
            "test_mae": self.maes[-1],
            "test_rmse": self.rmses[-1],
            "unit": self.data.unit,
            "eval_steps": self.eval_steps,
            "test_mae_curve": self.maes,
            "test_rmse_curve": self.rmses,
        }


class _Bar(Protocol):
    def set_description(self, desc: str) -> None: ...
    def update(self, n: int) -> Any: ...


def drive_runs(
    runs: Sequence[RunSpec],
    cfg: BenchConfig,
    make_run: Callable[[RunSpec], BenchRun],
    *,
    bar: _Bar,
    label: Callable[[RunSpec], str],
    before_alone: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """The records of ``runs``. ``cfg.interleave``: the runs of one repeat are stepped in turn
    -- step k of every run before step k+1 of any -- so that load changes on a shared machine
    hit all of them alike (memory figures are then process-wide); otherwise each run trains
    alone, after ``before_alone()``. ``bar`` shows ``label(spec)`` and counts steps."""
    records: list[dict[str, Any]] = []
    if not cfg.interleave:
        for spec in runs:
            bar.set_description(label(spec))
            if before_alone is not None:
                before_alone()
            records.append(make_run(spec).train_alone(on_step=lambda: bar.update(1)))
        return records
    for r in range(cfg.repeats):
        group = [make_run(s) for s in runs if s.repeat == r]
        for k in range(cfg.steps):
            for run in group:
                bar.set_description(label(run.spec))
                run.step(k)
                bar.update(1)
        for run in group:
            run.profile_if_asked()
        records.extend(run.record(interleaved=True) for run in group)
        del group
    return records
