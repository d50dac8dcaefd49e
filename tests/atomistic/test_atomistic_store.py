"""MACE batches read straight from an atomistic store (`ga.mace(r_max, z_table=...)` over a
`GraphStore`) against MACE's own path: the same padded dicts as `gt.loader` over
``AtomicData.from_config`` graphs (keys, dtypes, shapes, values; edges compared per graph as
(i, j, unit shift) rows), MACE's energies/forces/stress equal to MACE on its own unpadded
``AtomicData`` batches (float64, <= 1e-10), workers/resume, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace")
pytest.importorskip("vesin")
import ase.io  # noqa: E402

import graphbatch.atomistic as ga  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.datasets import GraphStore, build_atoms_store, emt_structures  # noqa: E402

from ..datasets.test_atoms_store import special_structures  # noqa: E402

R_MAX = 3.5
ZS = [13, 28, 29, 46, 47, 78, 79]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mace_store")
    frames = list(emt_structures(24, seed=5, max_atoms=24)) + special_structures()
    for k, a in enumerate(frames):
        a.info["config_weight"] = 1.0 + (k % 3) / 2  # MACE's per-configuration weight
    xyz = d / "set.xyz"
    ase.io.write(xyz, frames, format="extxyz")
    h5 = d / "set.h5"
    build_atoms_store(xyz, h5, cutoff=R_MAX)
    return xyz, h5


@pytest.fixture(scope="module")
def mace_data(files):
    """MACE's own path: load_from_xyz -> AtomicData.from_config (float64)."""
    from mace.data import AtomicData
    from mace.data.utils import KeySpecification, load_from_xyz
    from mace.tools import AtomicNumberTable

    keys = KeySpecification(
        info_keys={
            "energy": "REF_energy",
            "stress": "REF_stress",
            "virials": "REF_virials",
            "head": "head",
        },
        arrays_keys={"forces": "REF_forces", "charges": "REF_charges"},
    )
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _, configs = load_from_xyz(str(files[0]), keys)
        return [
            AtomicData.from_config(c, z_table=AtomicNumberTable(ZS), cutoff=R_MAX) for c in configs
        ]
    finally:
        torch.set_default_dtype(old)


def _edge_order(batch) -> np.ndarray:
    rows = torch.cat([batch["edge_index"].T.double(), batch["unit_shifts"]], 1).numpy()
    return np.lexsort(rows.T[::-1])


def _assert_same_batch(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    oa, ob = _edge_order(a), _edge_order(b)
    for key in a:
        va, vb = a[key], b[key]
        if not torch.is_tensor(va):
            assert va == vb, key
            continue
        assert (va.dtype, va.shape) == (vb.dtype, vb.shape), key
        if key == "edge_index":
            va, vb = va[:, oa], vb[:, ob]
        elif key in ("shifts", "unit_shifts"):
            va, vb = va[oa], vb[ob]
        if va.is_floating_point():
            torch.testing.assert_close(va, vb, rtol=0, atol=1e-12, msg=key)
        else:
            assert torch.equal(va, vb), key


def test_store_batches_equal_the_atomic_data_path(files, mace_data):
    store = GraphStore(files[1])
    preset = ga.mace(r_max=R_MAX, z_table=ZS, dtype=torch.float64)
    mine = gt.loader(store, strategy="dynamic", batch_size=6, seed=1, preset=preset)
    theirs = gt.loader(mace_data, strategy="dynamic", batch_size=6, seed=1, preset=preset)
    assert len(mine) == len(theirs) > 3
    first = list(mine)
    for a, b in zip(theirs, first, strict=True):
        _assert_same_batch(a, b)
    # a worker (batches through the shared-memory slots) gives the same batches
    with_workers = gt.loader(
        store,
        strategy="dynamic",
        batch_size=6,
        seed=1,
        preset=preset,
        dataloader_kwargs={"num_workers": 1},
    )
    for a, b in zip(first, with_workers, strict=True):
        _assert_same_batch(a, b)


def _assert_identical(a: dict, b: dict) -> None:
    """The same keys in the same order, and every tensor the same dtype, shape and bits."""
    assert list(a) == list(b)
    for key in a:
        va, vb = a[key], b[key]
        if not torch.is_tensor(va):
            assert va == vb, key
            continue
        assert (va.dtype, va.shape, va.is_contiguous()) == (vb.dtype, vb.shape, True), key
        assert torch.equal(va, vb), key
        if va.is_floating_point():
            assert torch.equal(va.view(-1).abs().sign(), vb.view(-1).abs().sign()), key


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_transform_equals_its_plain_torch_form_bit_for_bit(files, tmp_path, dtype):
    """The store path's NumPy transform against its plain torch form (every float gathered
    as float64, torch ops per batch; tests/atomistic/_mace_reference.py): identical dicts on
    every batch -- periodic cells, slabs, clusters, one-atom cells, an all-padding batch,
    shifts served by the per-graph table and edge by edge (a one-atom cell at a cutoff of 4.5
    cell lengths), a store without stress or heads."""
    from graphbatch.torch._store_batch import StoreBatcher

    from ._mace_reference import reference_view

    store = GraphStore(files[1])
    reader = ga.mace(r_max=R_MAX, z_table=ZS, heads=["x", "Default"], dtype=dtype).store_reader
    fast = StoreBatcher(store, view=reader.for_store(store))
    ref = StoreBatcher(store, view=reference_view(reader.for_store(store)))
    n = len(store)
    batches = [np.arange(k, min(n, k + 7)) for k in range(0, n, 7)] + [
        np.arange(n)[::-1],
        np.zeros(0, dtype=np.int64),
    ]
    for index in batches:
        nodes = int(store.n_node[index].sum()) + 3
        edges = int(store.n_edge[index].sum()) + 5
        shape = (nodes, edges, len(index) + 2)
        _assert_identical(fast(index, shape), ref(index, shape))
    # a tiny periodic cell at a long cutoff: |unit shift| up to 5 (shifts edge by edge)
    from ase.build import bulk

    wide = tmp_path / "wide.xyz"
    cu = bulk("Cu", "fcc", a=3.61)
    cu.info["REF_energy"] = 1.0
    cu.arrays["REF_forces"] = np.zeros((1, 3))
    ase.io.write(wide, [cu, cu], format="extxyz")
    build_atoms_store(wide, tmp_path / "wide.h5", cutoff=12.0)
    small = GraphStore(tmp_path / "wide.h5")
    assert int(np.abs(small.packed().edge["unit_shifts"]).max()) > 4
    reader = ga.mace(r_max=12.0, z_table=ZS, dtype=dtype).store_reader
    fast = StoreBatcher(small, view=reader.for_store(small))
    ref = StoreBatcher(small, view=reference_view(reader.for_store(small)))
    shape = (4, int(small.n_edge.sum()) + 2, 4)
    _assert_identical(fast([0, 1], shape), ref([0, 1], shape))


def test_edge_shifts_equal_the_plain_product_in_both_forms():
    """`edge_shifts` (table per graph and shift, or edge by edge) against ``(u0 c0 + u1 c1) +
    u2 c2`` computed edge by edge in float64."""
    from graphbatch.atomistic._mace_transform import edge_shifts

    rng = np.random.default_rng(0)
    for m, n_graph, per in ((1, 5, 40), (2, 3, 200), (4, 2, 2000), (7, 4, 50), (2, 60, 3)):
        counts = rng.integers(0, 2 * per, size=n_graph)
        u = rng.integers(-m, m + 1, size=(int(counts.sum()), 3)).astype(np.int16)
        cell = rng.normal(0, 4, size=(n_graph, 3, 3))
        per_edge = np.repeat(cell, counts, axis=0)
        want = (u[:, 0:1] * per_edge[:, 0] + u[:, 1:2] * per_edge[:, 1]) + u[:, 2:3] * per_edge[
            :, 2
        ]
        for dt in (np.float64, np.float32):
            out = np.full((u.shape[0], 3), np.nan, dtype=dt)
            edge_shifts(u, cell, counts, out)
            assert np.array_equal(out, want.astype(dt)), (m, n_graph, dt)


def test_mace_on_store_batches_equals_mace_on_its_own_batches(files, mace_data):
    """Energies, forces and stress per real structure: store-fed padded batches vs MACE's
    unpadded `Batch.from_data_list` of the same AtomicData, float64, within 1e-10."""
    from mace.tools import torch_geometric

    model = _model()
    store = GraphStore(files[1])
    loader = gt.loader(
        store,
        strategy="dynamic",
        batch_size=8,
        seed=0,
        preset=ga.mace(r_max=R_MAX, z_table=ZS, dtype=torch.float64),
    )
    seen = 0
    for batch in loader:
        real = batch["graph_index"][batch["graph_mask"]].tolist()
        ref = torch_geometric.Batch.from_data_list([mace_data[i] for i in real])
        out = model(batch, training=False, compute_stress=True)
        want = model(ref.to_dict(), training=False, compute_stress=True)
        g = len(real)
        for key, rows in (("energy", g), ("stress", g)):
            torch.testing.assert_close(out[key][:rows], want[key], rtol=0, atol=1e-10)
        n = int(batch["node_mask"].sum())
        torch.testing.assert_close(out["forces"][:n], want["forces"], rtol=0, atol=1e-10)
        assert torch.isfinite(out["energy"]).all() and torch.isfinite(out["forces"]).all()
        seen += g
    assert seen == len(store)


def _model():
    from e3nn import o3
    from mace import modules

    torch.manual_seed(0)
    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    return modules.MACE(
        r_max=R_MAX,
        num_bessel=4,
        num_polynomial_cutoff=5,
        max_ell=1,
        interaction_cls=block,
        interaction_cls_first=block,
        num_interactions=2,
        num_elements=len(ZS),
        hidden_irreps=o3.Irreps("8x0e + 8x1o"),
        MLP_irreps=o3.Irreps("8x0e"),
        atomic_energies=np.linspace(-3.0, -1.0, len(ZS)),
        avg_num_neighbors=10.0,
        atomic_numbers=ZS,
        correlation=2,
        gate=torch.nn.functional.silu,
    ).double()


def test_resume_gives_the_next_batch(files):
    store = GraphStore(files[1])
    preset = ga.mace(r_max=R_MAX, z_table=ZS)
    loader = gt.loader(store, strategy="dynamic", batch_size=6, seed=2, preset=preset)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    want = next(it)
    again = gt.loader(store, strategy="dynamic", batch_size=6, seed=2, preset=preset)
    again.load_state_dict(state)
    got = next(iter(again))
    assert torch.equal(got["graph_index"], want["graph_index"])
    assert torch.equal(got["positions"], want["positions"])
    assert got["positions"].dtype == torch.get_default_dtype()


def test_clear_errors_for_stores_that_cannot_feed_mace(files, tmp_path):
    from graphbatch.datasets import GraphArrays, write_store

    store = GraphStore(files[1])
    with pytest.raises(ValueError, match=r"element\(s\) \[79\] .* not in the z table"):
        gt.loader(
            store, strategy="dynamic", batch_size=4, preset=ga.mace(r_max=R_MAX, z_table=ZS[:-1])
        )
    with pytest.raises(ValueError, match="needs the model's z table"):
        gt.loader(store, strategy="dynamic", batch_size=4, preset=ga.mace(r_max=R_MAX))
    with pytest.raises(ValueError, match="larger than the store's cutoff"):
        gt.loader(
            store, strategy="dynamic", batch_size=4, preset=ga.mace(r_max=R_MAX + 1, z_table=ZS)
        )
    for dtype in (torch.float16, torch.bfloat16):  # torch has no LU for them (volume, rcell)
        with pytest.raises(ValueError, match=f"float32 or torch.float64, not {dtype}"):
            preset = ga.mace(r_max=R_MAX, z_table=ZS, dtype=dtype)
            gt.loader(store, strategy="dynamic", batch_size=4, preset=preset)
    plain = GraphArrays(
        n_node=[2],
        n_edge=[1],
        edge_index=[[0], [1]],
        node={"pos": np.zeros((2, 3)), "z": np.array([1, 6])},
    )
    write_store(tmp_path / "plain.h5", [plain], name="plain")
    with pytest.raises(ValueError, match=r"no field\(s\) \['positions', 'atomic_numbers'"):
        gt.loader(
            GraphStore(tmp_path / "plain.h5"),
            strategy="dynamic",
            batch_size=4,
            preset=ga.mace(r_max=R_MAX, z_table=ZS),
        )


@pytest.mark.slow
def test_bench_mace_trains_from_an_atomistic_store(tmp_path):
    """``graphbatch bench --models mace --store STORE``: the padded run reads the store, MACE's
    baseline gets AtomicData of the same structures; both train (finite losses)."""
    import json

    from graphbatch.cli import main

    xyz, h5 = tmp_path / "s.xyz", tmp_path / "s.h5"
    ase.io.write(xyz, list(emt_structures(24, seed=2, max_atoms=8, kinds={"bulk": 1.0})))
    build_atoms_store(xyz, h5, cutoff=3.0)
    out = tmp_path / "bench"
    assert (
        main(
            [
                "bench",
                "--models",
                "mace",
                "--store",
                str(h5),
                "--subset",
                "24",
                "--steps",
                "2",
                "--strategies",
                "dynamic,mace-eager",
                "--compile",
                "off",
                "--batch-sizes",
                "4",
                "--eval-every",
                "2",
                "--no-plots",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    records = json.loads((out / "results.json").read_text())
    records = records["records"] if isinstance(records, dict) else records
    assert {r["strategy"] for r in records} == {"dynamic", "mace-eager"}
    for r in records:
        assert r["r_max"] == 3.0 and len(r["train_loss"]) == 2
        assert all(np.isfinite(r["train_loss"])) and np.isfinite(r["test_rmse"])
    assert {r["data_source"] for r in records} == {"store"}


def test_heads_map_to_the_model_heads_as_in_mace(tmp_path):
    """The store's head names become the model's head indices (MACE: a name not in the
    model's heads gets the last head); weights and config types come through."""
    from graphbatch.datasets import AtomsKeys

    frames = list(emt_structures(4, seed=9, max_atoms=6, kinds={"bulk": 1.0}))
    for k, a in enumerate(frames):
        a.info["task"] = ["mp", "omat", "other", "mp"][k]
    ase.io.write(tmp_path / "h.xyz", frames)
    build_atoms_store(
        tmp_path / "h.xyz", tmp_path / "h.h5", cutoff=3.0, keys=AtomsKeys(head_key="task")
    )
    store = GraphStore(tmp_path / "h.h5")
    assert store.meta["heads"] == ["mp", "omat", "other"]
    preset = ga.mace(r_max=3.0, z_table=ZS, heads=["omat", "mp", "Default"])
    loader = gt.loader(
        store, strategy="dynamic", batch_size=5, seed=0, shuffle=False, preset=preset
    )
    batch = next(iter(loader))
    real = batch["graph_mask"]
    assert batch["graph_index"][real].tolist() == [0, 1, 2, 3]
    assert batch["head"][real].tolist() == [1, 0, 2, 1]
    assert batch["head"][~real].eq(0).all()
