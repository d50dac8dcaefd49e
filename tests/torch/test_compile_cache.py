"""graphbatch.torch's compile cache: the persistent cache folder, the artifact key, and a run's
compiled artifacts saved and loaded by a run with another, empty cache folder."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch import _compile_kernels as ck  # noqa: E402


def tiny(hidden: int = 8, dtype=torch.float32) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, hidden), torch.nn.SiLU(), torch.nn.Linear(hidden, 1)
    ).to(dtype)


# ----------------------------------------------------------------------------- the key
def test_key_ignores_values_and_follows_architecture_shapes_and_options():
    torch.manual_seed(0)
    a, b = tiny(), tiny()  # same architecture, other weights
    shapes = [[64, 500, 9]]
    ka, kb = gt.compile_key(a, shapes), gt.compile_key(b, shapes)
    assert ka == kb and len(ka.digest) == 64 and ka.short == ka.digest[:16]
    assert ka.fields["model"] == "torch.nn.modules.container.Sequential"
    assert ka.fields["parameters"] == sum(p.numel() for p in a.parameters())
    assert ka.fields["device"].startswith("cpu:") and ka.fields["torch"] == torch.__version__
    others = {
        "parameters": gt.compile_key(tiny(hidden=9), shapes),
        "tensor_digest": gt.compile_key(tiny(dtype=torch.float64), shapes),
        "shapes": gt.compile_key(a, [[64, 501, 9]]),
        "options": gt.compile_key(a, shapes, options={"mode": "reduce-overhead"}),
    }
    for field, other in others.items():
        assert other.digest != ka.digest
        assert field in ka.differences(other.fields)
    # a compiled wrapper is keyed as its module
    assert gt.compile_key(torch.compile(a), shapes) == ka


def test_key_of_a_plan_is_its_distinct_padded_shapes(molecule_sizes):
    model = tiny()
    plan = gb.plan(molecule_sizes, "buckets", batch_size=32, num_shapes=3, seed=0)
    key = gt.compile_key(model, plan)
    assert key.fields["shapes"] == plan.shapes().tolist() and len(key.fields["shapes"]) == 3
    rows = np.repeat(plan.shapes()[::-1], 2, axis=0)  # order and repeats do not matter
    assert gt.compile_key(model, rows) == key


@pytest.mark.parametrize(
    "shapes, options, error",
    [
        ([[1, 2]], None, "rows"),
        ([], None, "rows"),
        ([[1, -2, 3]], None, "non-negative"),
        ([[1.5, 2, 3]], None, "integers"),
        ([[1, 2, 3]], {"f": object()}, "JSON"),
        ([[1, 2, 3]], ["mode"], "mapping"),
    ],
)
def test_key_refuses_bad_input(shapes, options, error):
    with pytest.raises((gb.InputError, TypeError), match=error):
        gt.compile_key(tiny(), shapes, options=options)


def test_key_refuses_a_non_module():
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        gt.compile_key(lambda x: x, [[1, 2, 3]])


# ----------------------------------------------------------------------------- the cache folder
def test_compile_cache_points_torch_there_and_restores(tmp_path, monkeypatch):
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with iconfig.patch(fx_graph_cache=False):  # (pytest's monkeypatch deletes config keys)
        with pytest.warns(UserWarning, match="temporary directory"):
            cache = gt.compile_cache(tmp_path / "cc")
        with cache:
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cc" / "inductor")
            assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "cc" / "triton")
            assert cache.inductor_dir.is_dir() and cache.triton_dir.is_dir()
            assert iconfig.fx_graph_cache and fconfig.enable_autograd_cache
            from torch._inductor.runtime.cache_dir_utils import cache_dir

            assert Path(cache_dir()) == cache.inductor_dir
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"
        assert "TRITON_CACHE_DIR" not in os.environ
        assert iconfig.fx_graph_cache is False


def test_compile_cache_default_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(gt.COMPILE_CACHE_ENV, str(tmp_path / "env"))
    assert gt.default_compile_cache() == tmp_path / "env"
    monkeypatch.delenv(gt.COMPILE_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gt.default_compile_cache() == tmp_path / "xdg" / "graphbatch" / "torch-compile"
    monkeypatch.setenv(gt.COMPILE_CACHE_ENV, str(tmp_path / "env2"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gt.compile_cache() as cache:
            assert cache.path == (tmp_path / "env2").resolve()


def test_compile_cache_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(gb.InputError, match="not a folder"):
        gt.compile_cache(tmp_path / "f")


# ----------------------------------------------------------------------------- save / load
class FakeTorchArtifacts:
    """torch.compiler's save/load of cache artifacts, recorded (no compilation needed)."""

    def __init__(self, blob: bytes | None) -> None:
        self.blob, self.loaded = blob, []

    def save(self):
        if self.blob is None:
            return None
        info = type("Info", (), {"artifacts": {"inductor": ["k1", "k2"]}})()
        return self.blob, info

    def load(self, data: bytes):
        self.loaded.append(bytes(data))


@pytest.fixture
def fake(monkeypatch):
    f = FakeTorchArtifacts(b"torch's own bytes \x00\x01")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", f.save)
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", f.load)
    return f


def kernel(root: Path, key: str, suffix: str = ".so", data: bytes = b"\x7fELF kernel") -> str:
    path = root / key[1:3] / f"{key}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"{key[1:3]}/{key}{suffix}"


@pytest.fixture
def quiet_caches(tmp_path):
    """Two cache folders (the saving node's and a fresh node's), temp-dir warning off."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="compile cache .* temporary")
        yield tmp_path / "node-a", tmp_path / "node-b"


def test_artifacts_round_trip_to_a_fresh_cache_folder(tmp_path, fake, monkeypatch, quiet_caches):
    node_a, node_b = quiet_caches
    key = gt.compile_key(tiny(), [[10, 20, 3]])
    run = tmp_path / "run"
    with gt.compile_cache(node_a) as a:
        names = [
            kernel(a.inductor_dir, "cabcdefgh1234", ".main.so"),
            kernel(a.inductor_dir, "cabcdefgh1234", ".so"),
        ]
        kernel(a.inductor_dir, "czzzzzzzz9999")  # another model's kernel: not carried
        monkeypatch.setattr(ck, "_loaded_kernel_keys", lambda: {"cabcdefgh1234"})
        record = gt.save_compile_artifacts(run, key)
    assert record == run / f"compile-{key.short}.json"
    rec = json.loads(record.read_text())
    assert rec["digest"] == key.digest and rec["key"] == key.fields
    blob = (run / rec["files"]["torch"]["file"]).read_bytes()
    assert blob == fake.blob and rec["files"]["torch"]["sha256"] == hashlib.sha256(blob).hexdigest()
    bundle = zipfile.ZipFile(run / rec["files"]["kernels"]["file"])
    assert sorted(bundle.namelist()) == sorted(names)
    assert not list(tmp_path.glob("run/.*.tmp"))  # atomic writes leave nothing behind
    with gt.compile_cache(node_b) as b:
        assert gt.load_compile_artifacts(run, key) is True
        assert fake.loaded == [fake.blob]
        for name in names:
            assert (b.inductor_dir / name).read_bytes() == b"\x7fELF kernel"
        assert not (b.inductor_dir / "zz").exists()


def test_no_artifacts_is_a_silent_cold_start(tmp_path, fake):
    key = gt.compile_key(tiny(), [[10, 20, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gt.load_compile_artifacts(tmp_path / "missing", key) is False
        assert gt.load_compile_artifacts(tmp_path, key, strict=True) is False
    assert fake.loaded == []


def test_another_key_warns_naming_what_differs_or_raises_when_strict(tmp_path, fake):
    saved = gt.compile_key(tiny(), [[10, 20, 3]])
    gt.save_compile_artifacts(tmp_path, saved)
    wanted = gt.compile_key(tiny(), [[10, 20, 4]], options={"mode": "max-autotune"})
    with pytest.warns(UserWarning, match=r"another key .*options, shapes.*from scratch"):
        assert gt.load_compile_artifacts(tmp_path, wanted) is False
    with pytest.raises(gb.InputError, match="another key"):
        gt.load_compile_artifacts(tmp_path, wanted, strict=True)
    # a record renamed to the wanted key's file name is refused too
    os.replace(tmp_path / f"compile-{saved.short}.json", tmp_path / f"compile-{wanted.short}.json")
    with pytest.raises(gb.InputError, match=r"another key \(differs in options, shapes\)"):
        gt.load_compile_artifacts(tmp_path, wanted, strict=True)
    assert fake.loaded == []


def test_damaged_artifacts_are_refused(tmp_path, fake):
    key = gt.compile_key(tiny(), [[10, 20, 3]])
    record = gt.save_compile_artifacts(tmp_path, key)
    blob = tmp_path / f"compile-{key.short}.torch"
    blob.write_bytes(blob.read_bytes()[:-1] + b"X")
    with pytest.warns(UserWarning, match="SHA-256"):
        assert gt.load_compile_artifacts(tmp_path, key) is False
    rec = json.loads(record.read_text())
    rec["files"]["torch"]["file"] = "../elsewhere.torch"
    record.write_text(json.dumps(rec))
    with pytest.raises(gb.InputError, match="not a plain name"):
        gt.load_compile_artifacts(tmp_path, key, strict=True)
    record.write_text("{not json")
    with pytest.raises(gb.InputError, match="not valid JSON"):
        gt.load_compile_artifacts(tmp_path, key, strict=True)
    assert fake.loaded == []


def test_a_kernel_bundle_cannot_write_outside_the_cache(tmp_path, quiet_caches):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../../evil.so", b"x")
    with gt.compile_cache(quiet_caches[0]):
        with pytest.raises(gb.InputError, match="unexpected member"):
            ck.unpack_kernels(buf.getvalue(), "bundle")
        with pytest.raises(gb.InputError, match="not a kernel bundle"):
            ck.unpack_kernels(b"not a zip", "bundle")
    assert not (tmp_path / "evil.so").exists()


def test_nothing_compiled_saves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: None)
    with pytest.warns(UserWarning, match="nothing saved"):
        assert gt.save_compile_artifacts(tmp_path, gt.compile_key(tiny(), [[1, 2, 3]])) is None
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- real compiles
RUN = textwrap.dedent(
    """
    import json, sys, warnings
    from pathlib import Path
    import torch
    import graphbatch.torch as gt

    mode, cache, run = sys.argv[1], sys.argv[2], sys.argv[3]
    warnings.simplefilter("ignore")
    c = gt.compile_cache(cache)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1))
    key = gt.compile_key(model, [[16, 0, 1]], options={"fullgraph": True})
    loaded = gt.load_compile_artifacts(run, key, strict=True) if mode == "load" else None
    unpacked = sorted(str(p.relative_to(c.inductor_dir)) for p in c.inductor_dir.rglob("*.so"))
    fn = torch.compile(model, fullgraph=True, dynamic=False)
    x = torch.randn(16, 4)
    fn(x).sum().backward()
    if mode == "save":
        gt.save_compile_artifacts(run, key)
    from torch._dynamo.utils import counters
    print(json.dumps({
        "loaded": loaded,
        "unpacked": unpacked,
        "after": sorted(str(p.relative_to(c.inductor_dir)) for p in c.inductor_dir.rglob("*.so")),
        "grad": model[0].weight.grad.sum().item(),
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
    }))
    """
)


@pytest.mark.slow
def test_a_fresh_cache_loading_the_artifacts_compiles_nothing(tmp_path):
    """Two processes, two empty cache folders: the second loads the first's artifacts and
    compiles no graph and no C++ kernel (every kernel it uses came from the bundle)."""
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def run(mode: str, cache: str) -> dict:
        proc = subprocess.run(
            [sys.executable, str(script), mode, str(tmp_path / cache), str(tmp_path / "run")],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cold = run("save", "node-a")
    assert cold["fx_miss"] >= 1 and cold["fx_hit"] == 0
    warm = run("load", "node-b")
    assert warm["loaded"] is True
    assert warm["fx_miss"] == 0 and warm["fx_hit"] >= 1 and warm["aot_hit"] >= 1
    assert warm["unpacked"] and warm["after"] == warm["unpacked"]  # no kernel compiled
    assert warm["grad"] == pytest.approx(cold["grad"], rel=1e-6)
