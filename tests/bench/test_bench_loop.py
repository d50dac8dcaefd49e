"""The run loop every bench run shares (`graphbatch.bench._loop`), with a framework-free run
whose batches, update and compilations are scripted: the counters, the evaluation schedule,
the record's keys and the order in which `drive_runs` steps runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("psutil")  # the bench extra: the loop records the peak RSS

from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch.analysis import BENCH_KEYS
from graphbatch.bench import BenchConfig, RunSpec
from graphbatch.bench._loop import BenchRun, RunFacts, StepSizes, drive_runs


class _Data:
    unit = "Ha"


class ScriptedRun(BenchRun):
    """Batch k holds ``graphs[k]`` real graphs of 2 nodes and 3 edges each, padded to a
    fixed (64, 96, 8) shape; step k compiles ``compiles[k]`` times."""

    def __init__(self, spec: RunSpec, cfg: BenchConfig, graphs, compiles, log) -> None:
        self.spec, self.cfg, self.data, self.budget = spec, cfg, _Data(), [64, 96, 8]
        self.graphs, self.compiles, self.log = list(graphs), list(compiles), log
        self._count_now = 0
        self.batches = (k for k in range(10**9))
        self.reset_counters()

    def next_batch(self) -> Any:
        return next(self.batches)

    def compile_count(self) -> int:
        return self._count_now

    def update(self, k: Any) -> None:
        self.log.append((self.spec.strategy, k))
        self._count_now += self.compiles[k]

    def step_sizes(self, k: Any) -> StepSizes:
        g = self.graphs[k]
        return StepSizes((g, 2 * g, 3 * g), (64, 96), (64, 96, 8), 1000 + k)

    def evaluate(self) -> tuple[float, float]:
        return 1.0 / (1 + len(self.maes)), 2.0

    def facts(self, compiling: np.ndarray, steady: np.ndarray) -> RunFacts:
        return RunFacts(
            compiled=True,
            device="cpu",
            num_workers=0,
            prefetch=0,
            sharing_strategy=None,
            params=7,
            model_impl="scripted",
            compile_mode=None,
            compile_s=0.0,
            distinct_shapes=len(self.shapes),
            peak_mem_bytes=self.peak_rss,
            peak_mem_kind="process_rss",
        )


def _cfg(steps: int, eval_every: int, **kw: Any) -> BenchConfig:
    return BenchConfig(steps=steps, eval_every=eval_every, repeats=1, **kw)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=12).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.lists(st.integers(0, 2), min_size=len(g), max_size=len(g)),
            st.integers(1, len(g) + 1),
        )
    )
)
def test_counters_and_evaluation_schedule(case):
    graphs, compiles, eval_every = case
    steps = len(graphs)
    run = ScriptedRun(RunSpec("m", "s", 8, 0, True), _cfg(steps, eval_every), graphs, compiles, [])
    rec = run.train_alone()
    assert rec["real_graphs"] == sum(graphs)
    assert rec["compiles"] == sum(compiles)
    assert rec["compile_steps"] == [k for k in range(steps) if compiles[k] > 0]
    assert rec["real_graphs_steps"] == graphs
    assert rec["node_efficiency"] == pytest.approx(2 * sum(graphs) / (64 * steps))
    assert rec["edge_efficiency"] == pytest.approx(3 * sum(graphs) / (96 * steps))
    assert rec["batch_bytes_max"] == 1000 + steps - 1
    assert rec["distinct_shapes"] == 1
    due = [k + 1 for k in range(steps) if (k + 1) % eval_every == 0 or k + 1 == steps]
    assert rec["eval_steps"] == due
    assert rec["test_mae_curve"] == [1.0 / (1 + i) for i in range(len(due))]
    assert rec["test_mae"] == rec["test_mae_curve"][-1]
    assert rec["peak_mem_kind"] == "process_rss" and rec["interleaved"] is False
    assert rec["budget"] == [64, 96, 8] and rec["params"] == 7


def test_record_keys_are_the_analysis_contract():
    run = ScriptedRun(RunSpec("m", "s", 8, 0, True), _cfg(3, 2), [2, 3, 4], [1, 0, 0], [])
    rec = run.train_alone()
    missing = [k for k in BENCH_KEYS if k not in rec and k not in ("framework",)]
    assert missing == []
    assert list(rec)[:4] == ["model", "strategy", "batch_size", "repeat"]


@pytest.mark.parametrize("interleave", [True, False])
def test_drive_runs_order(interleave):
    cfg = _cfg(3, 3, interleave=interleave)
    runs = [RunSpec("m", s, 8, 0, False) for s in ("a", "b")]
    log: list[tuple[str, int]] = []

    class Bar:
        def __init__(self) -> None:
            self.descriptions: list[str] = []
            self.steps = 0

        def set_description(self, d: str) -> None:
            self.descriptions.append(d)

        def update(self, n: int) -> None:
            self.steps += n

    bar = Bar()
    records = drive_runs(
        runs,
        cfg,
        lambda spec: ScriptedRun(spec, cfg, [1, 1, 1], [0, 0, 0], log),
        bar=bar,
        label=lambda spec: spec.strategy,
    )
    assert [r["strategy"] for r in records] == ["a", "b"]
    assert all(r["interleaved"] is interleave for r in records)
    assert bar.steps == 6
    if interleave:
        assert log == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    else:
        assert log == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
