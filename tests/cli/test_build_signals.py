"""``graphbatch data build`` stopped by a signal, from the outside: SIGTERM to the process, or
SIGINT to its whole process group (Ctrl-C in a terminal reaches the worker processes too).
Every build -- extxyz (in this process or in worker processes), ASE database, code, MOSES
(worker processes), QM9, sharded -- exits promptly with one line naming the signal and no
traceback, leaving no store and no temporary behind. Each build runs in its own process
session with timeouts, so a build deaf to the signal fails the test instead of hanging it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("h5py")

_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A 12 MB extxyz file (the same 100 EMT structures 60 times) and a 1,500-row ASE
    database: a few seconds of building each."""
    pytest.importorskip("ase")
    pytest.importorskip("vesin")
    import ase.db
    import ase.io

    from graphbatch.datasets import emt_structures

    root = tmp_path_factory.mktemp("signal-inputs")
    frames = list(emt_structures(100, seed=1, max_atoms=40))
    text = io.StringIO()
    ase.io.write(text, frames, format="extxyz")
    (root / "big.xyz").write_text(text.getvalue() * 60)
    with ase.db.connect(root / "big.db") as db:
        for _ in range(15):
            for atoms in frames:
                db.write(atoms)
    return root


def _needs(*modules: str) -> None:
    for m in modules:
        pytest.importorskip(m)


def _has_qm9() -> bool:
    try:
        from graphbatch.datasets._qm9 import qm9_source_dir

        qm9_source_dir()
    except Exception:
        return False
    return True


#: name -> (arguments after ``data build``, output, modules needed)
BUILDS = {
    "extxyz": (["extxyz", "{in}/big.xyz", "--require"], "o.h5", ()),
    "extxyz-workers": (
        ["extxyz", "{in}/big.xyz", "--require", "--workers", "2", "--chunk-frames", "64"],
        "o.h5",
        (),
    ),
    "ase-db": (["ase-db", "{in}/big.db", "--require", "--chunk-frames", "32"], "o.h5", ()),
    "code": (["code"], "o.h5", ()),
    "moses-workers": (["moses", "--limit", "200000", "--workers", "2"], "o.h5", ("rdkit",)),
    "qm9": (["qm9"], "o.h5", ()),
    "sharded": (
        ["moses", "--limit", "100000", "--shards", "3", "--workers", "2"],
        "m.json",
        ("rdkit", "distributed"),
    ),
}


def _stop_build(name: str, how: str, inputs: Path, cwd: Path) -> tuple[int, str, float]:
    """Start build ``name`` in ``cwd``, wait until it writes a temporary, send the signal
    ``how`` (``term``: SIGTERM to the process; ``int-group``: SIGINT to its process group)
    and return ``(exit status, stderr, seconds from the signal to the exit)``."""
    args, out, modules = BUILDS[name]
    _needs(*modules)
    if name == "qm9" and not _has_qm9():
        pytest.skip("QM9 (qm9pack) is not installed")
    cmd = [sys.executable, "-m", "graphbatch.cli", "data", "build"]
    cmd += [a.format(**{"in": inputs}) for a in args] + ["--no-progress", "--out", out]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if any(p.name.startswith(".") for p in cwd.iterdir()):
                break  # a store (or shard) is being written
            time.sleep(0.02)
        assert proc.poll() is None, f"the build ended before the signal: {proc.stderr.read()}"
        time.sleep(0.3)  # well inside the build
        sent = time.time()
        if how == "term":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        took = time.time() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, err, took


@pytest.mark.parametrize("how", ["term", "int-group"])
@pytest.mark.parametrize(
    "name",
    [
        *[n for n in BUILDS if n != "sharded"],
        pytest.param("sharded", marks=pytest.mark.slow),
    ],
)
def test_a_signalled_build_stops_in_one_line_leaving_nothing(tmp_path, inputs, name, how):
    sig = signal.SIGTERM if how == "term" else signal.SIGINT
    rc, err, took = _stop_build(name, how, inputs, tmp_path)
    word = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (SIGINT)"
    assert rc == 128 + sig, (rc, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"graphbatch data: {word}; "), err
    assert took < (60 if name == "sharded" else 20), took
    time.sleep(0.5)  # worker processes of a process group end with the build
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "left behind"


def test_a_second_signal_during_the_cleanup_changes_nothing(tmp_path, inputs):
    """SIGTERM, then Ctrl-C pressed five times during the cleanup: one line, no traceback,
    nothing left."""
    args, out, _ = BUILDS["extxyz-workers"]
    cmd = [sys.executable, "-m", "graphbatch.cli", "data", "build"]
    cmd += [a.format(**{"in": inputs}) for a in args] + ["--no-progress", "--out", out]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_ENV, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not any(
            p.name.startswith(".") for p in tmp_path.iterdir()
        ):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        for _ in range(5):
            time.sleep(0.01)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    # the first signal handled wins (signals pending together are handled in number order)
    word = {143: "terminated (SIGTERM)", 130: "interrupted (SIGINT)"}.get(proc.returncode)
    assert word is not None, (proc.returncode, err)
    assert err.count("\n") == 1 and word in err and "Traceback" not in err, err
    time.sleep(0.5)
    assert list(tmp_path.iterdir()) == []


def test_an_in_process_build_leaves_the_signal_handlers_as_they_were(tmp_path):
    """``main(["data", "build", ...])`` called from a program (a test run, a notebook) routes
    SIGTERM and SIGINT to the build only while it runs."""
    pytest.importorskip("ase")
    pytest.importorskip("vesin")
    from graphbatch.cli import main

    (tmp_path / "w.xyz").write_text(
        "3\nProperties=species:S:1:pos:R:3 REF_energy=1.0\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n"
    )
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    args = ["data", "build", "extxyz", str(tmp_path / "w.xyz"), "--cutoff", "3", "--require"]
    assert main([*args, "--out", str(tmp_path / "w.h5"), "--no-progress"]) == 0
    assert {s: signal.getsignal(s) for s in before} == before
