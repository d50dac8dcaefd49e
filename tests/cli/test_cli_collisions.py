"""Options that collide are one-line errors, not tracebacks or silent choices (issue 26, part 5):
``plan --option`` naming one of ``graphbatch.plan``'s own arguments, an option given twice or by
its flag and ``--option``; ``bench`` with an unknown ``--compile-backend`` (checked before
anything runs), torch-only flags under ``--framework jax``, ``--store`` with ``--data memory``;
``demo --sizes`` with ``--shipped``."""

from __future__ import annotations

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.cli import main


@pytest.fixture
def sizes(tmp_path):
    path = tmp_path / "S.npz"
    gb.GraphSizes(np.arange(60) % 9 + 2, (np.arange(60) % 9 + 2) * 3).save(path)
    return path


def one_line_error(capsys, argv, *needles) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize(
    "option, flag",
    [
        ("seed=1", "--seed"),
        ("budget=[1,2]", "--max-nodes/--max-edges/--max-graphs"),
        ("batch-size=4", "--batch-size"),
        ("epoch=2", "--epoch"),
        ("world_size=2", "--world-size"),
        ("on-oversize=skip", "--on-oversize"),
        ("shuffle=false", "--no-shuffle"),
        ("strategy=kk", "--strategy"),
        ("sizes=3", "the SIZES argument"),
    ],
)
def test_plan_option_naming_a_plan_argument(tmp_path, sizes, capsys, option, flag):
    out = tmp_path / "p.npz"
    key = option.split("=")[0].replace("-", "_")
    one_line_error(
        capsys,
        [
            "plan",
            str(sizes),
            "--strategy",
            "pack-lpf",
            "--batch-size",
            "8",
            "--option",
            option,
            "--out",
            str(out),
        ],
        f"--option {key}=",
        f"use {flag}",
    )
    assert not out.exists()


def test_plan_option_given_twice_or_with_its_flag(tmp_path, sizes, capsys):
    base = [
        "plan",
        str(sizes),
        "--strategy",
        "pack-lpf",
        "--batch-size",
        "8",
        "--out",
        str(tmp_path / "p.npz"),
    ]
    one_line_error(
        capsys,
        [*base, "--option", "multiple=32", "--option", "multiple=64"],
        "--option multiple given twice (32 and 64)",
    )
    one_line_error(
        capsys,
        [*base, "--option", "multiple=32", "--multiple", "64"],
        "--multiple and --option multiple=32 both set multiple",
    )
    assert main([*base, "--option", "multiple=32"]) == 0  # once is fine
    capsys.readouterr()


@pytest.mark.requires("torch")
def test_bench_refuses_an_unknown_compile_backend_before_running(tmp_path, capsys, monkeypatch):
    import graphbatch.bench as bench

    def never(*a, **k):  # the check must come before the runs start
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(bench, "run_bench", never)
    out = tmp_path / "b"
    one_line_error(
        capsys,
        ["bench", "--compile-backend", "nope", "--out", str(out)],
        "unknown --compile-backend 'nope'",
        "inductor",
        "eager",
    )
    assert not out.exists()
    import dataclasses

    from graphbatch.bench import DEFAULT

    with pytest.raises(gb.UnknownNameError, match="'nope'"):
        dataclasses.replace(DEFAULT, compile_backend="nope").validate()
    dataclasses.replace(DEFAULT, compile_backend="eager").validate()  # a real one passes


@pytest.mark.parametrize(
    "argv, needles",
    [
        (
            ["--framework", "jax", "--compile-backend", "eager"],
            ["--framework jax does not use --compile-backend"],
        ),
        (
            ["--framework", "jax", "--num-workers", "2", "--device", "cpu"],
            ["--framework jax does not use --device, --num-workers"],
        ),
        (["--data", "memory", "--store", "x.h5"], ["--store x.h5 with --data memory"]),
    ],
)
def test_bench_flags_that_would_be_ignored(tmp_path, capsys, monkeypatch, argv, needles):
    from graphbatch.cli import _bench_cmd

    def never(*a, **k):  # refused before any run starts
        raise AssertionError("the benchmark started")

    for name in ("_run_jax", "_run_mace"):
        monkeypatch.setattr(_bench_cmd, name, never)
    if argv[0] != "--framework":
        pytest.importorskip("torch")
        import graphbatch.bench as bench

        monkeypatch.setattr(bench, "run_bench", never)
    one_line_error(capsys, ["bench", *argv, "--out", str(tmp_path / "b")], *needles)


def test_demo_sizes_and_shipped_collide(tmp_path, sizes, capsys):
    one_line_error(
        capsys,
        ["demo", "--sizes", str(sizes), "--shipped", "--out", str(tmp_path / "r.html")],
        "--sizes",
        "--shipped",
        "give one",
    )
