"""graphbatch.tune without timing anything: the fit, the probe design, the exact search and the
whole tune loop on a `SimulatedBackend` whose step costs are given functions of the shape."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.tuning import (
    ProbeMeasurement,
    SimulatedBackend,
    StepCostModel,
    TuneResult,
    load_request,
    plan_arrays_digest,
)
from graphbatch.tuning._candidates import (
    Candidate,
    batch_size_grid,
    candidate_requests,
    profile_candidates,
)
from graphbatch.tuning._design import design_probes, targeted_probes
from graphbatch.tuning._model import (
    MEMORY_UNITS_PER_BYTE,
    TIME_UNITS_PER_MS,
    CompileCost,
    LinearCost,
    fit_linear,
    fit_step_model,
)
from graphbatch.tuning._profile import profile_plan
from graphbatch.tuning._search import rank
from graphbatch.tuning._tune import parse_memory


@pytest.fixture(scope="module")
def sizes() -> gb.GraphSizes:
    """QM9-like radius graphs, 1,500 of them."""
    rng = np.random.default_rng(7)
    n = rng.integers(3, 30, size=1500)
    e = (n * (n - 1) * rng.uniform(0.5, 1.0, size=n.shape[0])).astype(np.int64)
    return gb.GraphSizes(n, e)


def linear_ms(a, bn, be, bg):
    return lambda n, e, g, mode=None: a + bn * n + be * e + bg * g


# ----------------------------------------------------------------------------- the fit
def test_fit_recovers_exact_linear_costs_and_quantises_to_integers():
    rng = np.random.default_rng(0)
    shapes = np.stack(
        [rng.integers(100, 5000, 12), rng.integers(1000, 80000, 12), rng.integers(8, 300, 12)],
        axis=1,
    )
    f = linear_ms(3.0, 0.01, 0.004, 0.02)
    y = [f(*s) for s in shapes]
    fit = fit_linear(shapes, y, units=TIME_UNITS_PER_MS)
    assert fit.features == ("n_node", "n_edge", "n_graph")
    assert fit.intercept == 3 * TIME_UNITS_PER_MS
    assert fit.coef == (10**7, 4 * 10**6, 2 * 10**7)  # picoseconds per node, edge, graph
    assert max(abs(x) for x in fit.loo_rel_errors) < 1e-9
    for s in shapes:  # integer predictions: exact at the probes
        assert fit.predict_units(s) == int(round(f(*s) * TIME_UNITS_PER_MS))


def test_fit_keeps_the_smallest_feature_set_the_data_supports():
    shapes = np.array([[100 * i, 1000 * i + 7 * i * i, 10 + i] for i in range(1, 9)])
    y = [2.0 + 0.005 * e for _, e, _ in shapes]  # only edges cost
    fit = fit_linear(shapes, y, units=TIME_UNITS_PER_MS)
    assert fit.features == ("n_edge",)
    assert fit.coef == (5 * 10**6,)


def test_fit_coefficients_are_nonnegative_and_loo_is_held_out():
    rng = np.random.default_rng(3)
    shapes = np.stack(
        [rng.integers(50, 4000, 10), rng.integers(500, 60000, 10), rng.integers(4, 200, 10)], axis=1
    )
    f = linear_ms(1.0, 0.02, 0.003, 0.0)
    y = np.array([f(*s) for s in shapes]) * np.exp(rng.normal(0, 0.05, 10))
    fit = fit_linear(shapes, y, units=TIME_UNITS_PER_MS)
    assert fit.intercept >= 0 and all(c >= 0 for c in fit.coef)
    assert len(fit.loo_rel_errors) == 10
    # a held-out probe's error is not its in-sample error
    assert fit.loo_rel_errors != fit.fit_rel_errors
    assert fit.loo_median < 0.2


def test_fit_refuses_bad_measurements():
    with pytest.raises(ValueError, match="finite and > 0"):
        fit_linear([[1, 2, 3], [2, 3, 4]], [1.0, -1.0], units=1)
    with pytest.raises(ValueError, match="no probe"):
        fit_linear(np.zeros((0, 3)), [], units=1)


def test_step_model_memory_margin_covers_every_probe():
    ms = []
    for i, (n, e) in enumerate(
        [(100, 900), (400, 5000), (900, 9000), (2000, 31000), (3000, 41000)]
    ):
        peak = 10**6 + 1500 * e + 300 * n + (4096 if i == 2 else 0)  # one probe above the line
        ms.append(ProbeMeasurement((n, e, 32), "compiled", (1.0 + e / 1e4,) * 3, 2000.0, peak))
    model = fit_step_model("compiled", ms)
    assert 0 < model.memory_margin < 50  # per mille
    for m in ms:
        assert model.peak_bytes(m.shape) >= m.peak_bytes
    assert model.compile.first_ms == round(2000.0 - (1.0 + 900 / 1e4))
    assert model.compiles


def test_compile_cost_first_then_per_shape():
    c = CompileCost(30_000, 12_000)
    assert c.total_ms(0) == 0
    assert c.total_ms(1) == 30_000
    assert c.total_ms(4) == 30_000 + 3 * 12_000


def test_parse_memory():
    assert parse_memory("2GiB") == 2 * 2**30
    assert parse_memory("512 MiB") == 512 * 2**20
    assert parse_memory("1.5") == int(1.5 * 2**30)
    assert parse_memory(1000) == 1000
    assert parse_memory(None) is None
    for bad in ("-1GiB", "two", "3 parsecs", True, 0):
        with pytest.raises(ValueError):
            parse_memory(bad)


# ----------------------------------------------------------------------------- candidates
def test_batch_size_grid_is_integer_and_within_tolerance():
    assert batch_size_grid(128, 0.1) == [115, 122, 128, 134, 141]
    assert batch_size_grid(128, 0.0) == [128]
    assert batch_size_grid(2, 0.5) == [2, 3]
    with pytest.raises(ValueError, match="batch tolerance"):
        batch_size_grid(128, 0.7)


def test_candidates_cover_the_issue_strategies_and_plan_as_requested(sizes):
    cands = candidate_requests(sizes, 64, tolerance=0.0)
    labels = [c.label for c in cands]
    for want in (
        "dynamic b=64",
        "pack-lpf b=64",
        "buckets b=64 K=1",
        "buckets b=64 K=8",
        "static-pow2 b=64",
        "static-64 b=64",
    ):
        assert want in labels
    assert any(lbl.startswith("pack-lpf limits") for lbl in labels)
    for c in cands:  # JSON-ready and accepted by graphbatch.plan as they are
        assert json.loads(json.dumps(c.request)) == c.request
    profiled, failed = profile_candidates(sizes, cands)
    assert not failed
    for pc in profiled:
        plan = gb.plan(sizes, **pc.candidate.request)
        assert pc.profile.digest == plan_arrays_digest(plan)
        assert pc.profile.num_steps == len(plan)
        assert pc.profile.real_graphs == len(sizes)


def test_balancing_candidates_with_world_size(sizes):
    cands = candidate_requests(sizes, 32, tolerance=0.0, world_size=2)
    assert {"kk", "balance", "stratified"} <= {c.strategy for c in cands}
    profiled, _ = profile_candidates(sizes, cands, world_size=2)
    for pc in profiled:
        plan = gb.plan(sizes, world_size=2, **pc.candidate.request)
        assert pc.profile.num_steps == plan.num_steps
        assert pc.profile.world_size == 2


def test_profile_counts_recompilations_of_later_epochs(sizes):
    req = {"strategy": "static-64", "batch_size": 32, "seed": 0}
    p0, p1, p2 = (gb.plan(sizes, epoch=e, **req) for e in range(3))
    prof = profile_plan(p0, [p1, p2])
    s0 = {tuple(r) for r in p0.shapes().tolist()}
    s1 = {tuple(r) for r in p1.shapes().tolist()} - s0
    s2 = {tuple(r) for r in p2.shapes().tolist()} - s0 - s1
    assert prof.later_new == (len(s1), len(s2))
    assert {tuple(r) for r in prof.later_shapes.tolist()} == s1 | s2
    for r in prof.later_shapes.tolist():  # where each new shape first appears
        e, step = prof.where(r)
        assert tuple(gb.plan(sizes, epoch=e, **req).shape(step)) == tuple(r)
    assert int(prof.steps.sum()) == len(p0)


# ----------------------------------------------------------------------------- probe design
def test_design_spans_the_extremes_without_repeats():
    rng = np.random.default_rng(1)
    n = np.sort(rng.integers(100, 5000, 40))
    shapes = np.unique(np.stack([n, 15 * n + rng.integers(0, 50, 40), n // 17 + 2], 1), axis=0)
    w = rng.integers(1, 100, shapes.shape[0])
    idx = design_probes(shapes, w, 6)
    assert len(idx) == len(set(idx)) == 6
    assert idx[0] == int(np.flatnonzero(w == w.max())[0])  # the most used shape first
    chosen = shapes[idx]
    assert chosen[:, 0].min() == shapes[:, 0].min() and chosen[:, 0].max() == shapes[:, 0].max()
    assert design_probes(shapes, w, 6) == idx  # deterministic
    assert design_probes(shapes, w, 100) == design_probes(shapes, w, shapes.shape[0])
    more = targeted_probes(shapes, [(shapes[-3:], np.array([5, 9, 1]))], idx, 2)
    assert len(more) <= 2 and not set(more) & set(idx)
    ok = np.arange(shapes.shape[0]) % 3 != 0  # only eligible shapes are picked
    picked = design_probes(shapes, w, 5, eligible=ok)
    assert len(picked) == 5 and ok[picked].all()


# ----------------------------------------------------------------------------- the search
def _model(ms_fn, compile_ms=(0, 0), mode="compiled", mem=None):
    """A StepCostModel whose time is exactly ``ms_fn`` (linear, integer picoseconds)."""
    a, bn, be, bg = ms_fn
    t = LinearCost(
        ("n_node", "n_edge", "n_graph"),
        int(a * TIME_UNITS_PER_MS),
        tuple(int(x * TIME_UNITS_PER_MS) for x in (bn, be, bg)),
        TIME_UNITS_PER_MS,
    )
    m = None
    if mem is not None:
        m = LinearCost(
            ("n_node", "n_edge", "n_graph"),
            mem[0] * MEMORY_UNITS_PER_BYTE,
            tuple(x * MEMORY_UNITS_PER_BYTE for x in mem[1:]),
            MEMORY_UNITS_PER_BYTE,
        )
    return StepCostModel(mode, t, CompileCost(*compile_ms), m)


@pytest.fixture(scope="module")
def profiled32(sizes):
    return profile_candidates(
        sizes, candidate_requests(sizes, 32, tolerance=0.0, limit_search=False)
    )[0]


@given(
    a=st.floats(0, 50),
    bn=st.floats(0, 0.05),
    be=st.floats(0, 0.01),
    bg=st.floats(0, 0.1),
    compile_s=st.integers(0, 60),
    epochs=st.integers(1, 50),
)
def test_rank_orders_by_exact_time_per_real_graph(profiled32, a, bn, be, bg, compile_s, epochs):
    profiled = profiled32
    model = _model((a, bn, be, bg), (compile_s * 1000, compile_s * 1000))
    ranking = rank(profiled, [model], epochs=epochs)
    assert len(ranking) == len(profiled)

    # independently: total time of `epochs` epochs per real graph, in exact integers
    def total(pred):
        pc = next(p for p in profiled if p.candidate.label == pred.label)
        steps = sum(
            int(c) * model.step_ps(s)
            for s, c in zip(pc.profile.shapes.tolist(), pc.profile.steps.tolist(), strict=True)
        )
        shapes = pc.profile.distinct_shapes + pred.recompiles
        return epochs * steps + model.compile.total_ms(shapes) * TIME_UNITS_PER_MS

    for x, y in itertools.pairwise(ranking):
        assert total(x) * y.real_graphs <= total(y) * x.real_graphs


def test_rank_puts_memory_infeasible_last(sizes):
    profiled, _ = profile_candidates(sizes, candidate_requests(sizes, 32, tolerance=0.0))
    model = _model((1, 0.01, 0.002, 0), mem=(10**6, 200, 30, 100))
    free = rank(profiled, [model], epochs=5)
    peaks = sorted({p.peak_bytes for p in free})
    assert len(peaks) > 2
    limit = peaks[len(peaks) // 2]
    capped = rank(profiled, [model], epochs=5, memory_limit=limit)
    assert capped[0].feasible and capped[0].peak_bytes <= limit
    seen_infeasible = False
    for p in capped:
        assert p.feasible == (p.peak_bytes <= limit)
        seen_infeasible |= not p.feasible
        assert p.feasible or seen_infeasible
    assert any(not p.feasible for p in capped)


def test_rank_is_independent_of_candidate_float_noise(sizes):
    """Equal predicted totals tie exactly (integers): fewer shapes, then candidate order."""
    profiled, _ = profile_candidates(sizes, candidate_requests(sizes, 32, tolerance=0.0))
    model = _model((0, 0, 0, 0))  # every step free: all totals 0
    r = rank(profiled, [model], epochs=3)
    keys = [(p.shapes, p.index) for p in r]
    assert keys == sorted(keys)


# ----------------------------------------------------------------------------- tune, simulated
def true_best(sizes, result, fn, compile_ms, epochs):
    """The best candidate by the true (simulated) costs, computed independently."""
    best = None
    for p in result.ranking:
        plan = gb.plan(sizes, **p.request)
        shapes = np.stack([plan.pad_nodes, plan.pad_edges, plan.pad_graphs], 1)
        t = sum(fn(*s) for s in shapes.tolist()) * epochs
        t += compile_ms * (p.shapes + p.recompiles)
        g = epochs * plan.num_graphs / t
        if best is None or g > best[0]:
            best = (g, p.label)
    return best


@pytest.mark.parametrize("compile_ms", [0.0, 60_000.0])
def test_tune_chooses_the_true_best_on_exact_linear_costs(sizes, compile_ms):
    fn = linear_ms(5.0, 0.02, 0.003, 0.05)
    be = SimulatedBackend(
        sizes, lambda n, e, g, m: fn(n, e, g), compile_ms=lambda n, e, g, m: compile_ms
    )
    res = gb.tune(None, backend=be, batch_size=48, epochs=3, probes=8, rounds=2)
    best_gps, best_label = true_best(sizes, res, fn, compile_ms, 3)
    chosen = res.ranking[0]
    plan = gb.plan(sizes, **res.request)
    shapes = np.stack([plan.pad_nodes, plan.pad_edges, plan.pad_graphs], 1)
    t = 3 * sum(fn(*s) for s in shapes.tolist()) + compile_ms * (chosen.shapes + chosen.recompiles)
    assert 3 * plan.num_graphs / t >= best_gps * (1 - 1e-6), (chosen.label, best_label)
    assert res.models["compiled"].time.loo_median < 1e-6
    if compile_ms:  # a minute per shape over 3 epochs: one shape wins
        assert chosen.shapes == 1
    # buckets whose tight shapes minimise the fitted cost were searched too
    by_cost = [p for p in res.ranking if p.label.endswith("by compiled cost")]
    t = res.models["compiled"].time
    per_unit = [t.predict_units(u) - t.intercept for u in ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    assert by_cost and all(p.request["shape_cost"][1:4] == per_unit for p in by_cost)


def test_tune_memory_limit_is_a_hard_constraint(sizes):
    fn = linear_ms(1.0, 0.01, 0.002, 0.01)
    mem = lambda n, e, g, m: 10**6 + 400 * n + 90 * e + 1000 * g  # noqa: E731
    be = SimulatedBackend(sizes, lambda n, e, g, m: fn(n, e, g), memory_bytes=mem, noise=0.02)
    free = gb.tune(
        None, backend=be, batch_size=48, epochs=3, probes=6, rounds=2, validate=1, validate_steps=4
    )
    peak = free.validation[0]["meas_peak_bytes"]
    assert peak == max(
        mem(*s, None) for s in profile_plan(gb.plan(sizes, **free.request)).shapes.tolist()
    )
    be2 = SimulatedBackend(sizes, lambda n, e, g, m: fn(n, e, g), memory_bytes=mem, noise=0.02)
    capped = gb.tune(
        None,
        backend=be2,
        batch_size=48,
        epochs=3,
        probes=6,
        rounds=2,
        validate=1,
        validate_steps=4,
        memory_limit=peak - 1,
    )
    assert capped.validation[0]["meas_peak_bytes"] <= peak - 1
    assert capped.request != free.request
    with pytest.raises(ValueError, match="no configuration fits"):
        gb.tune(
            None,
            backend=SimulatedBackend(sizes, lambda n, e, g, m: 1.0, memory_bytes=mem),
            batch_size=48,
            probes=4,
            rounds=1,
            memory_limit=10,
        )


def test_tune_without_memory_measure_refuses_a_limit(sizes):
    be = SimulatedBackend(sizes, lambda n, e, g, m: 1.0 + e / 1e4)
    with pytest.raises(ValueError, match="peak-memory measure"):
        gb.tune(None, backend=be, memory_limit="1GiB")


def test_tune_prefers_eager_when_compiling_never_pays(sizes):
    fn = linear_ms(2.0, 0.01, 0.002, 0.01)
    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: fn(n, e, g) * (1.2 if m == "eager" else 1),
        compile_ms=lambda n, e, g, m: 10**7,
        modes=("compiled", "eager"),
    )
    res = gb.tune(None, backend=be, batch_size=48, epochs=1, probes=5, rounds=2)
    assert res.mode == "eager"
    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: fn(n, e, g) * (1.2 if m == "eager" else 1),
        compile_ms=lambda n, e, g, m: 1.0,
        modes=("compiled", "eager"),
    )
    assert gb.tune(None, backend=be, batch_size=48, epochs=1, probes=5, rounds=2).mode == "compiled"


def test_validation_compares_the_same_steps(sizes):
    fn = linear_ms(3.0, 0.01, 0.003, 0.02)
    be = SimulatedBackend(sizes, lambda n, e, g, m: fn(n, e, g))
    res = gb.tune(
        None, backend=be, batch_size=48, epochs=2, probes=6, rounds=2, validate=3, validate_steps=6
    )
    assert len(res.validation) == 3
    assert len({v["config"] for v in res.validation}) == 3
    for v in res.validation:
        assert abs(v["step_err_pct"]) < 0.01  # exact linear costs: exact predictions
        plan = gb.plan(sizes, **v["request"])
        assert v["shapes_all"] == [list(plan.shape(i)) for i in range(6)]


def test_result_round_trips_and_the_request_replans_the_evaluated_plan(sizes, tmp_path):
    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: 1.0 + 0.003 * e + 0.01 * n,
        memory_bytes=lambda n, e, g, m: 1000 + n + e,
    )
    res = gb.tune(
        None, backend=be, batch_size=40, epochs=2, probes=5, rounds=1, validate=1, validate_steps=3
    )
    path = res.save(tmp_path / "result.json")
    back = TuneResult.load(path)
    assert back.as_dict() == json.loads(json.dumps(res.as_dict()))
    req_file = res.save_request(tmp_path / "tune.json")
    request = json.loads(req_file.read_text())
    assert request == res.request == load_request(req_file) == load_request(path)
    plan = gb.plan(sizes, **request)
    assert plan_arrays_digest(plan) == res.ranking[0].plan_digest
    # and through the CLI's --config
    np.savez(tmp_path / "sizes.npz", n_node=sizes.n_node, n_edge=sizes.n_edge)
    out = tmp_path / "plan.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "plan",
            str(tmp_path / "sizes.npz"),
            "--config",
            str(req_file),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert plan_arrays_digest(gb.BatchPlan.load(out)) == res.ranking[0].plan_digest
    with pytest.raises(ValueError, match="not a tune result"):
        TuneResult.from_dict({"format": "other"})


def test_load_request_refuses_non_requests(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="strategy"):
        load_request(p)
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"not (valid )?JSON"):
        load_request(p)


def test_tune_refuses_bad_arguments(sizes):
    be = SimulatedBackend(sizes, lambda n, e, g, m: 1.0)
    for kw, msg in (
        (dict(probes=21), "exceeds the limit 20"),
        (dict(probes=1), "at least 2"),
        (dict(batch_tolerance=0.9), "batch tolerance"),
        (dict(strategies=["nope"]), "unknown strategy"),
    ):
        with pytest.raises(ValueError, match=msg):
            gb.tune(None, backend=be, **kw)


def test_candidate_is_a_plain_request():
    c = Candidate("x", {"strategy": "dynamic", "batch_size": 8, "seed": 0})
    assert c.strategy == "dynamic"


def test_report_shows_the_tune_table_and_the_fit_against_its_probes(sizes, tmp_path):
    pytest.importorskip("matplotlib")
    from graphbatch.report import build_report

    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: (2.0 + 0.004 * e) * (1.3 if m == "eager" else 1.0),
        compile_ms=lambda *a: 5000.0,
        memory_bytes=lambda n, e, g, m: 10**6 + e,
        modes=("compiled", "eager"),
        noise=0.02,
    )
    res = gb.tune(None, backend=be, batch_size=32, probes=5, rounds=2, validate=2, validate_steps=3)
    res.save(tmp_path / "r.json")
    html = build_report(
        sizes.subset(np.arange(300)), tune=TuneResult.load(tmp_path / "r.json"), dpi=40
    )
    for key in (
        'id="fig-tune-fit"',
        'id="table-tune"',
        'id="table-tune-validation"',
        res.ranking[0].label,
    ):
        assert key in html


def test_plan_config_flags(sizes, tmp_path, capsys):
    from graphbatch.cli import main

    np.savez(tmp_path / "s.npz", n_node=sizes.n_node, n_edge=sizes.n_edge)
    req = {"strategy": "buckets", "budget": [640, 9216, 64], "num_shapes": 2, "seed": 3}
    (tmp_path / "r.json").write_text(json.dumps(req))
    base = ["plan", str(tmp_path / "s.npz"), "--out", str(tmp_path / "p.npz")]
    assert main([*base, "--config", str(tmp_path / "r.json")]) == 0
    got = gb.BatchPlan.load(tmp_path / "p.npz")
    assert plan_arrays_digest(got) == plan_arrays_digest(gb.plan(sizes, **req))
    # flags given too override the config (here the seed and a strategy option)
    assert (
        main([*base, "--config", str(tmp_path / "r.json"), "--seed", "5", "--num-shapes", "3"]) == 0
    )
    want = gb.plan(sizes, **{**req, "seed": 5, "num_shapes": 3})
    assert plan_arrays_digest(gb.BatchPlan.load(tmp_path / "p.npz")) == plan_arrays_digest(want)
    capsys.readouterr()
    assert main(base) == 2
    assert "give --strategy, or --config" in capsys.readouterr().err
    assert main([*base, "--config", str(tmp_path / "r.json"), "--strategy", "dynamic"]) == 2
    assert "differs from the --config" in capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                str(tmp_path / "s.npz"),
                "--config",
                str(tmp_path / "r.json"),
                "--out",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )  # never overwrite an input
