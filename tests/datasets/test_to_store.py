"""`graphbatch.datasets.to_store`: PyG graphs into a store and back, field for field."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("h5py")
pyg_data = pytest.importorskip("torch_geometric.data")

from graphbatch import plan  # noqa: E402
from graphbatch._errors import InputError, InputTypeError  # noqa: E402
from graphbatch.datasets import GraphStore, to_store  # noqa: E402
from graphbatch.torch import GraphStoreDataset, loader  # noqa: E402

Data = pyg_data.Data


def assert_same_graph(a: Data, b: Data) -> None:
    """Every field of ``a`` is in ``b`` with the same dtype, shape and values."""
    extra = set(b.keys()) - set(a.keys())
    assert extra <= {"edge_index", "num_nodes"}, extra
    assert set(a.keys()) <= set(b.keys())
    if "edge_index" in extra:  # a graph without edges reads back with an empty [2, 0] list
        assert b.edge_index.shape == (2, 0)
    assert a.num_nodes == b.num_nodes
    for key in a.keys():  # noqa: SIM118 (a Data iterates pairs)
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor), key
            assert x.dtype == y.dtype and x.shape == y.shape, (key, x, y)
            assert torch.equal(x, y), key
        else:
            assert type(x) is type(y) and x == y, key


def test_fake_dataset_round_trip(tmp_path):
    from torch_geometric.datasets import FakeDataset

    torch.manual_seed(0)
    ds = FakeDataset(num_graphs=40, avg_num_nodes=12, num_channels=5, edge_dim=3, task="graph")
    path = to_store(ds, tmp_path / "fake.h5")
    store = GraphStore(path)
    assert len(store) == len(ds)
    assert store.name == "FakeDataset"
    back = GraphStoreDataset(store)
    for i in range(len(ds)):
        assert_same_graph(ds[i], back[i])


def test_every_level_and_dtype_round_trips(tmp_path):
    g = Data(
        x=torch.randn(4, 3),
        z=torch.tensor([1, 6, 8, 1], dtype=torch.int32),
        mask=torch.tensor([True, False, True, True]),
        edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
        edge_attr=torch.randn(3, 2, dtype=torch.float64),
        y=torch.randn(1, 19),  # QM9's per-graph target row
        label=torch.tensor(3),  # a 0-d tensor
        half=torch.randn(2, 2).half(),
        bf=torch.randn(5).to(torch.bfloat16),
        idx=7,
        weight=0.5,
        flag=True,
    )
    h = g.clone()
    h.x = torch.randn(4, 3)
    path = to_store([g, h], tmp_path / "levels.h5")
    back = GraphStoreDataset(GraphStore(path))
    assert_same_graph(g, back[0])
    assert_same_graph(h, back[1])
    fields = GraphStore(path).fields
    assert fields["x"]["level"] == "node" and fields["edge_attr"]["level"] == "edge"
    assert fields["y"]["level"] == "graph" and fields["y"]["shape"] == [19]  # as PyG batches it


def test_padded_batches_from_the_store(tmp_path):
    """The written store feeds `graphbatch.torch.loader` (the store batch path)."""
    rng = np.random.default_rng(0)
    graphs = []
    for _ in range(30):
        n = int(rng.integers(2, 9))
        ei = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
        graphs.append(Data(x=torch.randn(n, 2), edge_index=ei, y=torch.randn(1)))
    store = GraphStore(to_store(graphs, tmp_path / "line.h5"))
    dl = loader(store, strategy="dynamic", batch_size=8, shuffle=False)
    seen = 0
    total_x = 0.0
    for batch in dl:
        seen += int(batch.graph_mask.sum())
        total_x += float(batch.x[batch.node_mask].sum())
    assert seen == len(graphs)
    assert total_x == pytest.approx(float(sum(g.x.sum() for g in graphs)), rel=1e-5)


def test_chunking_does_not_change_the_store(tmp_path):
    graphs = [Data(x=torch.full((k + 1, 1), float(k)), num_nodes=k + 1) for k in range(10)]
    a = GraphStore(to_store(graphs, tmp_path / "a.h5", chunk_graphs=3))
    b = GraphStore(to_store(graphs, tmp_path / "b.h5", chunk_graphs=1024))
    for i in range(10):
        assert_same_graph(GraphStoreDataset(a)[i], GraphStoreDataset(b)[i])
        assert_same_graph(graphs[i], GraphStoreDataset(a)[i])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 8)), min_size=1, max_size=6),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_round_trip_property(tmp_path_factory, sizes, channels, seed):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n, e in sizes:
        ei = torch.randint(0, n, (2, e), generator=gen)
        graphs.append(
            Data(
                x=torch.randn(n, channels, generator=gen),
                edge_index=ei,
                edge_w=torch.randn(e, generator=gen),
                y=torch.randn(1, 2, generator=gen),
            )
        )
    path = to_store(graphs, tmp_path_factory.mktemp("prop") / "p.h5", chunk_graphs=2)
    back = GraphStoreDataset(GraphStore(path))
    for i, g in enumerate(graphs):
        assert_same_graph(g, back[i])
    # plans read sizes from the store's metadata: they match the input's
    sizes_in = [(g.num_nodes, g.num_edges) for g in graphs]
    st_sizes = GraphStore(path).graph_sizes()
    assert list(zip(st_sizes.n_node.tolist(), st_sizes.n_edge.tolist(), strict=True)) == sizes_in
    assert plan(st_sizes, "dynamic", batch_size=2).stats().num_graphs == len(graphs)


def test_level_settled_by_reading_ahead(tmp_path):
    """A ``[1, T]`` target fits the node level of a one-node first graph; later graphs settle
    it as a graph field, as PyG batches it."""
    graphs = [Data(x=torch.randn(n, 2), y=torch.randn(1, 3), num_nodes=n) for n in (1, 1, 4, 2)]
    path = to_store(graphs, tmp_path / "ahead.h5")
    assert GraphStore(path).fields["y"]["level"] == "graph"
    assert GraphStore(path).fields["x"]["level"] == "node"
    for i, g in enumerate(graphs):
        assert_same_graph(g, GraphStoreDataset(GraphStore(path))[i])


def test_errors_name_the_graph_and_field(tmp_path):
    g = Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0], [1]]))
    with pytest.raises(InputError, match="empty"):
        to_store([], tmp_path / "e.h5")
    with pytest.raises(InputTypeError, match="graph 1 is a dict"):
        to_store([g, {"x": 1}], tmp_path / "e.h5")
    with pytest.raises(InputError, match=r"graph 1 has fields \['x', 'y'\]"):
        to_store([g, Data(x=torch.randn(2, 2), y=torch.ones(1), num_nodes=2)], tmp_path / "e.h5")
    with pytest.raises(InputError, match=r"field 'x' of graph 1 has shape \[2, 3\]"):
        to_store([g, Data(x=torch.randn(2, 3), edge_index=g.edge_index)], tmp_path / "e.h5")
    with pytest.raises(InputError, match=r"field 'x' of graph 1 is torch\.float64"):
        to_store(
            [g, Data(x=torch.randn(2, 2).double(), edge_index=g.edge_index)], tmp_path / "e.h5"
        )
    named = Data(x=torch.randn(3, 2), edge_index=g.edge_index, name="water")
    with pytest.raises(InputTypeError, match="field 'name' of graph 0 is a str"):
        to_store([named], tmp_path / "e.h5")
    path = to_store([named], tmp_path / "ok.h5", exclude=["name"])
    assert "name" not in GraphStoreDataset(GraphStore(path))[0]
    with pytest.raises(InputError, match="chunk_graphs"):
        to_store([g], tmp_path / "e.h5", chunk_graphs=0)
    assert not (tmp_path / "e.h5").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_never_overwrites_its_input(tmp_path):
    g = Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0], [1]]))
    path = to_store([g], tmp_path / "in.h5")
    store = GraphStore(path)
    before = path.read_bytes()
    with pytest.raises(Exception, match=r"is the input file"):
        to_store(GraphStoreDataset(store), path)
    assert path.read_bytes() == before
