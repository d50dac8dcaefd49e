"""``graphbatch bench --profile-steps N``: N steps after the timed ones under
``torch.profiler``, summarised in the record's ``profile``; the timed steps, their counts and
the training they saw are those of a run without it; refused for JAX and below 0."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from graphbatch import InputError  # noqa: E402
from graphbatch.bench import BenchConfig, run_bench  # noqa: E402
from graphbatch.bench._profile import TOP_ENTRIES  # noqa: E402
from graphbatch.cli import main  # noqa: E402

from .test_bench_modes import _cfg as _modes_cfg  # noqa: E402


def _cfg(**kw) -> BenchConfig:
    """test_bench_modes' tiny configuration, with PyG's baseline beside ``dynamic`` and one
    evaluation at the end."""
    return _modes_cfg(strategies=("dynamic", "pyg-eager"), eval_every=4, **kw)


@pytest.mark.parametrize("interleave", [True, False])
def test_profiled_steps_are_summarised_and_leave_the_timed_run_alone(data, interleave):
    plain = run_bench(_cfg(interleave=interleave), progress=False, data=data)
    profiled = run_bench(_cfg(interleave=interleave, profile_steps=3), progress=False, data=data)
    for a, b in zip(plain, profiled, strict=True):
        assert "profile" not in a
        p = b.pop("profile")
        assert p["steps"] == 3 and p["wall_ms"] > 0
        assert p["kernels"] is None and p["device_ms"] is None  # CPU
        assert 0 < len(p["top"]) <= TOP_ENTRIES
        hosts = [e["self_host_us"] for e in p["top"]]
        assert hosts == sorted(hosts, reverse=True)  # the costliest host entries first
        assert any(e["name"].startswith("aten::") for e in p["top"])
        # the host ops of a step: at least one call of each listed entry
        assert p["host_ops"] >= sum(e["calls"] for e in p["top"])
        # the timed steps: as many, the same batches, the same training
        assert len(b["step_ms"]) == len(a["step_ms"]) == 4
        assert b["real_graphs_steps"] == a["real_graphs_steps"]
        assert b["test_mae_curve"] == pytest.approx(a["test_mae_curve"], rel=1e-5)


def test_the_cli_flag_reaches_the_records_and_is_checked(tmp_path, capsys):
    out = tmp_path / "b"
    args = ["bench", "--strategies", "dynamic", "--batch-sizes", "6", "--steps", "2"]
    args += ["--repeats", "1", "--subset", "40", "--compile", "off", "--threads", "1"]
    assert main([*args, "--profile-steps", "2", "--no-plots", "--quiet", "--out", str(out)]) == 0
    (rec,) = json.loads((out / "results.json").read_text())
    assert rec["profile"]["steps"] == 2
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert "profile" not in header and "steps" in header  # the CSV keeps scalar fields
    with pytest.raises(InputError, match="profile_steps must be >= 0, got -1"):
        _cfg(profile_steps=-1)
    with pytest.raises(InputError, match="--profile-steps is for torch runs"):
        BenchConfig(framework="jax", strategies=("dynamic",), profile_steps=2).validate()
    assert main(["bench", "--framework", "jax", "--profile-steps", "2", "--out", str(out)]) != 0
    assert "--profile-steps" in capsys.readouterr().err
