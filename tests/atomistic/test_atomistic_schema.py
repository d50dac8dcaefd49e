"""Schema extensions for atomistic graphs, without MACE: fixed-row graph-level fields (a [3, 3]
cell), count fields from the padded layout (fairchem's natoms/nedges), tensor and callable pad
values, graphs carrying ``batch``, old-style PyG Data (``keys`` a property), the fairchem preset
on fairchem-shaped graphs, and the losses against a plain unpadded recomputation."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gt = pytest.importorskip("graphbatch.torch")
ga = pytest.importorskip("graphbatch.atomistic")


def _crystal(rng, n, e, *, with_batch=True):
    g = {
        "pos": torch.from_numpy(rng.uniform(0, 3, size=(n, 3))),
        "atomic_numbers": torch.from_numpy(rng.integers(1, 9, size=n)),
        "cell": torch.from_numpy(np.diag(rng.uniform(3, 4, size=3))).reshape(1, 3, 3),
        "natoms": torch.tensor([n]),
        "edge_index": torch.from_numpy(rng.integers(0, n, size=(2, e))),
        "cell_offsets": torch.from_numpy(rng.integers(-1, 2, size=(e, 3)).astype(np.float64)),
        "nedges": torch.tensor([e]),
        "energy": torch.tensor([float(rng.normal())]),
        "forces": torch.from_numpy(rng.normal(size=(n, 3))),
        "stress": torch.from_numpy(rng.normal(size=(1, 3, 3))),
        "sid": [f"s{n}-{e}"],
    }
    if with_batch:
        g["batch"] = torch.zeros(n, dtype=torch.int64)
    return g


def test_graph_level_field_with_fixed_rows():
    rng = np.random.default_rng(0)
    graphs = [
        {
            "num_nodes": n,
            "pos": torch.rand(n, 3, dtype=torch.float64),
            "edge_index": torch.zeros(2, 0, dtype=torch.int64),
            "cell": torch.from_numpy(rng.normal(size=(3, 3))),
        }
        for n in (2, 4, 5)
    ]
    schema = gt.infer_schema(graphs)
    assert schema["cell"].level == "graph" and schema["cell"].rows == 3
    eye = 7.0 * torch.eye(3, dtype=torch.float64)
    d = gt.collate_dict(graphs, (16, 4, 6), schema=schema.with_pad(cell=eye))
    assert d["cell"].shape == (18, 3)
    assert torch.equal(d["cell"][:9], torch.cat([g["cell"] for g in graphs]))
    assert torch.equal(d["cell"][9:].view(-1, 3, 3), eye.expand(3, 3, 3))
    # PyG batch: per-graph slices of 3 rows, round trip
    b = gt.collate(graphs, (16, 4, 6), schema=schema)
    assert torch.equal(b.get_example(1).cell, graphs[1]["cell"])
    # empty batch from the schema keeps the per-graph shape
    e = gt.collate_dict([], (3, 0, 2), schema=schema)
    assert e["cell"].shape == (6, 3)


def test_graph_level_rows_must_agree():
    graphs = [
        {
            "num_nodes": 2,
            "pos": torch.rand(2, 3),
            "edge_index": torch.zeros(2, 0, dtype=torch.int64),
            "cell": torch.rand(3, 3),
        },
        {
            "num_nodes": 3,
            "pos": torch.rand(3, 3),
            "edge_index": torch.zeros(2, 0, dtype=torch.int64),
            "cell": torch.rand(3, 3),
        },
    ]
    schema = gt.infer_schema(graphs)
    bad = [
        *graphs,
        {
            "num_nodes": 5,
            "pos": torch.rand(5, 3),
            "edge_index": torch.zeros(2, 0, dtype=torch.int64),
            "cell": torch.rand(4, 3),
        },
    ]
    with pytest.raises(ValueError, match="'cell' has 4 entries along dim 0"):
        gt.collate_dict(bad, (16, 4, 6), schema=schema)


def test_count_fields_follow_the_padded_layout_and_are_checked():
    rng = np.random.default_rng(1)
    graphs = [_crystal(rng, n, e) for n, e in ((3, 4), (5, 7), (2, 0))]
    pre = ga.fairchem(r_max=2.5)
    schema = pre.schema_for(graphs)
    assert "batch" not in schema  # the graphs' own batch vector is recomputed
    assert schema["natoms"].count == "node" and schema["nedges"].count == "edge"
    d = pre.collate(graphs, (14, 20, 6), schema=schema)
    assert torch.equal(d["natoms"], d["ptr"].diff())
    assert torch.equal(d["nedges"], d["edge_ptr"].diff())
    assert d["natoms"].tolist() == [3, 5, 2, 0, 0, 4] and d["nedges"].tolist() == [4, 7, 0, 0, 0, 9]
    assert d["batch"].max().item() == 5
    # padding cells r_max * I, padding cell offsets (1, 1, 1): padding edges longer than r_max
    assert torch.equal(d["cell"][3:], (2.5 * torch.eye(3, dtype=torch.float64)).expand(3, 3, 3))
    src, dst = d["edge_index"][:, 11:]
    vec = (
        d["pos"][src]
        - d["pos"][dst]
        + torch.einsum("ej,ejk->ek", d["cell_offsets"][11:], d["cell"][d["batch"][src]])
    )
    assert (vec.norm(dim=1) > 2.5).all()
    assert d["sid"][:3] == [g["sid"] for g in graphs] and d["sid"][3:] == [[""]] * 3
    graphs[1]["natoms"] = torch.tensor([6])
    with pytest.raises(ValueError, match="count field 'natoms' holds \\[6\\], but the graph has 5"):
        pre.collate(graphs, (14, 20, 6), schema=schema)


def test_count_field_absent_from_graphs_is_derived():
    rng = np.random.default_rng(2)
    graphs = [_crystal(rng, n, e) for n, e in ((3, 2), (4, 4))]
    for g in graphs:
        del g["natoms"], g["nedges"]
    d = ga.fairchem(r_max=2.0).collate(graphs, (10, 9, 4))
    assert d["natoms"].tolist() == [3, 4, 0, 3] and d["nedges"].tolist() == [2, 4, 0, 3]


def test_callable_pad_sees_the_batch():
    seen = []

    def pad(ctx):
        seen.append(ctx)
        return torch.full((3,), ctx.spacing * 1.5, dtype=ctx.dtype)

    graphs = [
        {
            "pos": torch.tensor([[0.0, 0, 0], [1.0, 0, 0]]),
            "edge_index": torch.tensor([[0, 1, 0], [1, 0, 1]]),
            "shift": torch.zeros(3, 3),
        }
    ]
    schema = gt.infer_schema(graphs).with_pad(shift=pad)
    d = gt.collate_dict(graphs, (3, 5, 2), schema=schema, cutoff=2.0)
    assert schema["shift"].level == "edge"
    assert torch.equal(d["shift"][3:], torch.full((2, 3), 3.0))
    assert seen[0].block_shape == (2, 3) and seen[0].num_real == (1, 2, 3)
    assert seen[0].spacing == 2.0
    bad = gt.infer_schema(graphs).with_pad(shift=torch.ones(4))
    with pytest.raises(ValueError, match="pad value of shape \\(4,\\) does not fit"):
        gt.collate_dict(graphs, (3, 5, 2), schema=bad)


class OldStyleData:
    """An old-style PyG Data as MACE vendors it: ``keys`` is a property, missing attributes read
    as None, ``num_nodes`` from ``__num_nodes__``."""

    def __init__(self, **kw):
        self.__num_nodes__ = kw.pop("num_nodes")
        for k, v in kw.items():
            setattr(self, k, v)

    @property
    def keys(self):
        return [k for k, v in self.__dict__.items() if v is not None and not k.startswith("__")]

    def __getitem__(self, key):
        return getattr(self, key, None)

    @property
    def num_nodes(self):
        return self.__num_nodes__

    def __cat_dim__(self, key, value):
        return -1 if "index" in key else 0

    def __inc__(self, key, value):
        return self.num_nodes if "index" in key else 0


def test_old_style_data_and_reserved_batch_are_accepted():
    graphs = [
        OldStyleData(
            num_nodes=n,
            positions=torch.rand(n, 3, dtype=torch.float64),
            edge_index=torch.tensor([[0, 1], [1, 0]]),
            cell=torch.eye(3),
            batch=torch.zeros(n, dtype=torch.int64),
            energy=torch.tensor(1.0 * n),
            charges=None,
        )
        for n in (2, 3)
    ]
    schema = gt.infer_schema(graphs)
    assert list(schema) == ["positions", "edge_index", "cell", "energy"]
    d = gt.collate_dict(graphs, (8, 6, 4), schema=schema, position_key="positions")
    assert d["batch"].tolist() == [0, 0, 1, 1, 1, 3, 3, 3]
    assert torch.equal(d["edge_index"][:, :4], torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]]))
    b = gt.collate(graphs, (8, 6, 4), schema=schema, position_key="positions")
    assert b.num_graphs == 4 and torch.equal(b.energy, torch.tensor([2.0, 3.0, 0.0, 0.0]))
    assert gt.read_sizes(graphs).n_node.tolist() == [2, 3]


def test_other_reserved_names_still_raise():
    g = {
        "pos": torch.rand(2, 3),
        "edge_index": torch.zeros(2, 0, dtype=torch.int64),
        "node_mask": torch.ones(2, dtype=torch.bool),
    }
    with pytest.raises(ValueError, match="'node_mask' clashes"):
        gt.infer_schema([g])


def _unpadded_loss(graphs, pred_e, pred_f, pred_s, w_e=1.0, w_f=1.0, w_s=1.0):
    """MACE's weighted losses recomputed by hand on the real graphs (no padding)."""
    n = torch.tensor([g["pos"].shape[0] for g in graphs], dtype=torch.float64)
    e_ref = torch.cat([g["energy"] for g in graphs])
    f_ref = torch.cat([g["forces"] for g in graphs])
    s_ref = torch.cat([g["stress"] for g in graphs])
    le = (((e_ref - pred_e) / n) ** 2).mean()
    lf = ((f_ref - pred_f) ** 2).mean()
    ls = ((s_ref - pred_s) ** 2).mean()
    return w_e * le + w_f * lf + w_s * ls


def test_losses_equal_unpadded_recomputation_with_nan_in_padding():
    rng = np.random.default_rng(3)
    graphs = [_crystal(rng, n, e) for n, e in ((3, 4), (5, 7), (2, 0))]
    d = ga.fairchem(r_max=2.5).collate(graphs, (14, 20, 6))
    n_real = 10
    pe = torch.from_numpy(rng.normal(size=6)).requires_grad_()
    pf = torch.from_numpy(rng.normal(size=(14, 3))).requires_grad_()
    ps = torch.from_numpy(rng.normal(size=(6, 3, 3))).requires_grad_()
    with torch.no_grad():  # garbage in the padding must not reach the loss or its gradient
        pe[3:] = float("nan")
        pf[n_real:] = float("inf")
        ps[3:] = float("nan")
    pred = {"energy": pe, "forces": pf, "stress": ps}
    loss = ga.energy_force_stress_loss(
        pred, d, energy_weight=2.0, forces_weight=0.5, stress_weight=3.0
    )
    ref = _unpadded_loss(graphs, pe[:3], pf[:n_real], ps[:3], 2.0, 0.5, 3.0)
    assert torch.isclose(loss, ref, rtol=1e-13, atol=0)
    loss.backward()
    for t, k in ((pe, 3), (pf, n_real), (ps, 3)):
        assert torch.isfinite(t.grad).all() and (t.grad[k:] == 0).all()
    ef = ga.energy_force_loss(pred, d)
    assert torch.isclose(
        ef, _unpadded_loss(graphs, pe[:3], pf[:n_real], ps[:3], 1, 1, 0), rtol=1e-13, atol=0
    )


def test_dict_without_num_nodes_names_the_node_count_source():
    graphs = [
        {
            "cell": torch.eye(3),
            "pos": torch.rand(n, 3),
            "charges": torch.rand(n),
            "edge_index": torch.zeros(2, 0, dtype=torch.int64),
        }
        for n in (4, 5)
    ]
    with pytest.raises(ValueError, match=r"node count was taken from 'cell'.*set num_nodes"):
        gt.infer_schema(graphs)
    for g in graphs:
        g["num_nodes"] = g["pos"].shape[0]
    schema = gt.infer_schema(graphs)
    assert schema["cell"].level == "graph" and schema["charges"].level == "node"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(
    counts=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6)), min_size=0, max_size=5),
    slack=st.tuples(st.integers(1, 4), st.integers(0, 5), st.integers(1, 3)),
    rows=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_fixed_rows_and_counts_property(counts, slack, rows, seed):
    """For any graphs and padded shape: the real part of a fixed-row graph field is the
    concatenation of the graphs' values and every padding graph holds the pad item; count
    fields equal ptr.diff()/edge_ptr.diff(); a callable pad fills exactly its block."""
    rng = np.random.default_rng(seed)
    graphs = []
    for n, e in counts:
        e = e if n else 0
        graphs.append(
            {
                "num_nodes": n,
                "pos": torch.from_numpy(rng.normal(size=(n, 3))),
                "edge_index": torch.from_numpy(rng.integers(0, max(n, 1), size=(2, e))),
                "shift": torch.from_numpy(rng.normal(size=(e, 3))),
                "lat": torch.from_numpy(rng.normal(size=(rows, 3))),
            }
        )
    n_real = sum(n for n, _ in counts)
    e_real = sum(e if n else 0 for n, e in counts)
    shape = (n_real + slack[0], e_real + slack[1], max(2, len(graphs) + slack[2]))
    item = torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3)
    schema = gt.Schema(
        {
            "pos": gt.FieldSpec("node", 0, dtype=torch.float64, shape=(-1, 3)),
            "edge_index": gt.FieldSpec("edge", 1, "node", dtype=torch.int64, shape=(2, -1)),
            "shift": gt.FieldSpec(
                "edge",
                0,
                dtype=torch.float64,
                shape=(-1, 3),
                pad=lambda ctx: torch.full(
                    ctx.block_shape, float(ctx.num_real[2]), dtype=ctx.dtype
                ),
            ),
            "lat": gt.FieldSpec("graph", 0, dtype=torch.float64, shape=(rows, 3), pad=item),
            "natoms": gt.FieldSpec("graph", None, dtype=torch.int64, shape=(), count="node"),
            "nedges": gt.FieldSpec("graph", None, dtype=torch.int64, shape=(), count="edge"),
        }
    )
    d = gt.collate_dict(graphs, shape, schema=schema)
    g = len(graphs)
    assert d["lat"].shape == (rows * shape[2], 3)
    if graphs:
        assert torch.equal(d["lat"][: rows * g], torch.cat([x["lat"] for x in graphs]))
        assert torch.equal(d["shift"][:e_real], torch.cat([x["shift"] for x in graphs]))
    assert torch.equal(d["lat"][rows * g :].view(-1, rows, 3), item.expand(shape[2] - g, rows, 3))
    assert (d["shift"][e_real:] == float(e_real)).all()
    assert torch.equal(d["natoms"], d["ptr"].diff())
    assert torch.equal(d["nedges"], d["edge_ptr"].diff())
    assert int(d["natoms"].sum()) == shape[0] and int(d["nedges"].sum()) == shape[1]


def test_presets_name_a_missing_r_max():
    """``r_max=None`` is no cutoff for a preset: a one-line error, not an arithmetic failure."""
    for preset in (ga.mace, ga.fairchem):
        with pytest.raises(TypeError, match="r_max must be a number, got None"):
            preset(None)
        with pytest.raises(ValueError, match="cutoff must be a positive finite distance"):
            preset(-1.0)
