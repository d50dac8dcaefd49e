"""tune's validation on a `SimulatedBackend` that a busy machine disturbs: a measurement it
cannot trust is taken again, and flagged when it stays untrustworthy; the break-even step
count of compiling, compile time counted against the planned steps."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.analysis import break_even
from graphbatch.tuning import SimulatedBackend, TuneResult
from graphbatch.tuning._validation import TRUST_RATIO


@pytest.fixture(scope="module")
def sizes() -> gb.GraphSizes:
    rng = np.random.default_rng(11)
    n = rng.integers(3, 30, size=1200)
    e = (n * (n - 1) * rng.uniform(0.5, 1.0, size=n.shape[0])).astype(np.int64)
    return gb.GraphSizes(n, e)


def step_ms(n, e, g, mode=None):
    return 2.0 + 0.01 * n + 0.002 * e + 0.02 * g


class Machine:
    """A load that the test switches by the messages tune reports: ``during`` is the factor
    on every timed step of the first validation pass, ``after`` on the passes that follow."""

    def __init__(self, during: float = 1.0, after: float = 1.0, uneven: bool = False) -> None:
        self.during, self.after, self.uneven = during, after, uneven
        self.factor = 1.0
        self.rng = np.random.default_rng(0)
        self.messages: list[str] = []

    def progress(self, msg: str) -> None:
        self.messages.append(msg)
        if msg.startswith("measuring step 1/") and not any("again" in m for m in self.messages):
            self.factor = self.during
        if "again" in msg:
            self.factor = self.after

    def disturb(self, call: int) -> float:
        if self.uneven and self.factor != 1.0:
            return float(self.rng.choice([1.0, self.factor]))
        return self.factor


def run_tune(sizes, machine: Machine, **kw):
    be = SimulatedBackend(sizes, step_ms, noise=0.02, disturb=machine.disturb)
    args = dict(batch_size=40, epochs=2, probes=5, rounds=2, validate=2, validate_steps=6)
    args.update(kw)
    return gb.tune(None, backend=be, progress=machine.progress, **args)


def test_an_undisturbed_validation_is_trusted_first_time(sizes):
    res = run_tune(sizes, Machine())
    assert len(res.validation) == 2 and res.untrusted == []
    for v in res.validation:
        assert v["trusted"] is True and v["trust_reasons"] == []
        assert v["attempts"] == 1 and v["earlier_attempts"] == []
        assert 0.9 < v["load_drift"] < 1.1 and v["step_spread"] < 1.3
    assert not any("again" in m for m in Machine().messages)


def test_a_transient_disturbance_is_measured_again_and_then_trusted(sizes):
    m = Machine(during=28.0, after=1.0)
    res = run_tune(sizes, m)
    assert sum("again" in msg for msg in m.messages) == 1
    for v in res.validation:
        assert v["trusted"] is True and v["attempts"] == 2
        (first,) = v["earlier_attempts"]
        text = " ".join(first["trust_reasons"])
        assert "predicted" in text and "load changed" in text
        assert first["load_drift"] > 20
        # the kept measurement is the undisturbed one
        assert abs(v["step_err_pct"]) < 10 and v["load_drift"] < 1.2
        assert first["meas_step_ms"] > 20 * v["meas_step_ms"]


def test_a_persistent_disturbance_is_flagged_not_reported_as_valid(sizes):
    m = Machine(during=28.0, after=28.0)
    res = run_tune(sizes, m, validate=1, validate_retries=2)
    (v,) = res.validation
    assert v["trusted"] is False and v["attempts"] == 3 and len(v["earlier_attempts"]) == 2
    assert res.untrusted == [v]
    # the case: predicted graphs/s ~28x what was measured
    ratio = v["pred_graphs_per_s"] / v["meas_graphs_per_s"]
    assert ratio > TRUST_RATIO * 10
    assert any(f"{28:.0f}" in r or "x the predicted" in r for r in v["trust_reasons"])
    res0 = run_tune(sizes, Machine(during=28.0, after=28.0), validate=1, validate_retries=0)
    assert res0.validation[0]["attempts"] == 1 and res0.validation[0]["trusted"] is False
    # the flags survive the result file
    back = TuneResult.from_dict(json.loads(json.dumps(res.as_dict())))
    assert back.untrusted[0]["trust_reasons"] == v["trust_reasons"]


def test_an_uneven_disturbance_is_caught_by_the_spread(sizes):
    res = run_tune(
        sizes,
        Machine(during=3.0, after=3.0, uneven=True),
        validate=1,
        validate_steps=12,
        validate_retries=1,
    )
    (v,) = res.validation
    assert v["trusted"] is False
    assert any("spread" in r for r in v["trust_reasons"])


def test_the_cli_warns_instead_of_reporting_an_untrusted_validation(
    sizes, tmp_path, monkeypatch, capsys
):
    from graphbatch.cli import _tune_cmd, main

    np.savez(tmp_path / "s.npz", n_node=sizes.n_node, n_edge=sizes.n_edge)
    m = Machine(during=28.0, after=28.0)
    real = gb.tune

    def simulated(source, **kw):
        kw.pop("progress")
        for k in ("model", "framework", "device", "compile", "threads"):
            kw.pop(k)
        be = SimulatedBackend(sizes, step_ms, noise=0.02, disturb=m.disturb)
        return real(None, backend=be, progress=m.progress, **kw)

    monkeypatch.setattr(_tune_cmd, "tune", simulated)
    base = [
        "tune",
        str(tmp_path / "s.npz"),
        "--batch-size",
        "40",
        "--epochs",
        "2",
        "--probes",
        "4",
        "--rounds",
        "1",
        "--validate",
        "1",
        "--validate-steps",
        "4",
        "--validate-retries",
        "1",
        "--quiet",
    ]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "WARNING: validation of" in out and "NOT trusted after 2 measurement(s)" in out
    m.__init__(during=28.0, after=28.0)
    assert main([*base, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["validation"][0]["trusted"] is False
    assert printed["settings"]["validate_retries"] == 1
    for key in ("request", "mode", "ranking", "models", "validation", "failed", "settings"):
        assert key in printed  # the existing keys stay


# ----------------------------------------------------------------------------- break-even
def total_s(pred, steps: int) -> float:
    """Seconds of ``steps`` steps' real graphs at the prediction's steady rate, compile
    included (computed from the prediction's own fields)."""
    graphs = steps * pred.real_graphs / pred.steps
    return pred.compile_ms / 1000 + graphs * pred.epoch_ps / 1e12 / pred.real_graphs


@pytest.mark.parametrize("compile_s, epochs", [(20.0, 1), (20.0, 40), (0.0, 1)])
def test_break_even_counts_compile_time_against_the_planned_steps(sizes, compile_s, epochs):
    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: step_ms(n, e, g) * (1.5 if m == "eager" else 1.0),
        compile_ms=lambda n, e, g, m: 0.0 if m == "eager" else compile_s * 1000,
        modes=("compiled", "eager"),
    )
    res = gb.tune(None, backend=be, batch_size=40, epochs=epochs, probes=5, rounds=2)
    out = res.break_even
    assert out is not None and out["epochs"] == epochs
    comp = next(p for p in res.ranking if p.mode == "compiled" and p.label == out["compiled"])
    eager = next(p for p in res.ranking if p.mode == "eager" and p.label == out["eager"])
    assert comp is next(p for p in res.ranking if p.mode == "compiled")
    assert out["planned_steps"] == epochs * comp.steps
    n = out["steps"]
    assert n is not None
    # the compiled run, compilation counted, is no slower after n steps, slower after n - 1
    assert total_s(comp, n) <= total_s_for(eager, comp, n) * (1 + 1e-9)
    if n > 0:
        assert total_s(comp, n - 1) > total_s_for(eager, comp, n - 1)
    assert out["pays_off"] == (n <= out["planned_steps"])
    if compile_s == 0.0:
        assert n == 0 and out["pays_off"]
    assert json.loads(json.dumps(res.as_dict()))["break_even"]["steps"] == n
    assert TuneResult.from_dict(json.loads(json.dumps(res.as_dict()))).break_even == out


def total_s_for(base, run, steps: int) -> float:
    """The baseline's seconds for the real graphs of ``steps`` steps of ``run``."""
    graphs = steps * run.real_graphs / run.steps
    return base.compile_ms / 1000 + graphs * base.epoch_ps / 1e12 / base.real_graphs


def test_break_even_needs_both_modes(sizes):
    be = SimulatedBackend(sizes, lambda n, e, g, m: step_ms(n, e, g))
    assert gb.tune(None, backend=be, batch_size=40, probes=3, rounds=1).break_even is None


pos = st.floats(0.01, 1e5, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(
    c=st.floats(0, 1e4),
    r=pos,
    g=st.floats(0.5, 512),
    cb=st.floats(0, 1e3),
    rb=pos,
    planned=st.integers(0, 10**7),
)
def test_break_even_is_the_first_step_that_catches_up(c, r, g, cb, rb, planned):
    out = break_even(c, r, g, cb, rb, planned_steps=planned)

    def run(n):
        return c + n * g / r

    def base(n):
        return cb + n * g / rb

    n = out["steps"]
    if n is None:
        assert r <= rb and c > cb  # slower or equal at steady state, behind at the start
        assert not out["pays_off"]
    else:
        assert run(n) <= base(n) * (1 + 1e-6) + 1e-9
        if n > 0:
            assert run(n - 1) > base(n - 1) * (1 - 1e-6) - 1e-9
        assert out["pays_off"] == (n <= planned)
        assert out["graphs"] == pytest.approx(n * g)
    total_run, total_base = run(planned), base(planned)
    if total_run > 0:
        assert out["speedup_planned"] == pytest.approx(total_base / total_run)


def test_break_even_with_missing_inputs_says_why():
    out = break_even(5.0, float("nan"), 10.0, 0.0, 100.0, planned_steps=10)
    assert out["steps"] is None and "missing" in out["reason"] and out["pays_off"] is False
    assert math.isfinite(break_even(1.0, 2.0, 3.0, 0.0, 1.0)["graphs"])
