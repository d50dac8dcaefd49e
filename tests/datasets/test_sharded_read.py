"""The sharded store's reader on its own (no cluster engine): for random partitions of the same
graphs into shards, every read equals the single-file store's (property test)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("h5py")

from graphbatch.datasets import (
    GraphArrays,
    GraphStore,
    ShardedGraphStore,
    StoreFormatError,
    open_store,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)
from graphbatch.datasets._manifest import (
    shard_facts,
    write_manifest_of_facts,
    write_manifest_of_shards,
)

from .._padded import assert_same_padded

N = 40


def _graphs() -> GraphArrays:
    sizes = synthetic_sizes(N, "heavy", rng=3, mean_nodes=6)
    g = synthetic_graphs(sizes, rng=4, node_dim=2, n_targets=2)
    rng = np.random.default_rng(5)
    n, e = int(sizes.n_node.sum()), int(sizes.n_edge.sum())
    return GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index.astype(np.int32),
        node={
            **g.node,
            "pos": rng.normal(size=(n, 3)).astype(np.float32),
            "z": rng.integers(1, 9, n).astype(np.uint8),
        },
        edge={"w": rng.random(e).astype(np.float32)},
        graph={**g.graph, "index": np.arange(100, 100 + N, dtype=np.int64)},
    )


GRAPHS = _graphs()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_partitions_read_like_one_file(tmp_path_factory, data):
    cuts = sorted(data.draw(st.sets(st.integers(1, N - 1), max_size=5), label="cuts"))
    bounds = [0, *cuts, N]
    folder = tmp_path_factory.mktemp("shards")
    single = GraphStore(write_store(folder / "one.h5", [GRAPHS], name="t"))
    paths = [
        write_store(folder / f"s{k}.h5", [GRAPHS.take(np.arange(a, b))], name="t")
        for k, (a, b) in enumerate(itertools.pairwise(bounds))
    ]
    write_manifest_of_shards(folder / "m.json", paths, name="t", meta={}, build={})
    store = open_store(folder / "m.json")
    assert isinstance(store, ShardedGraphStore) and store.n_shards == len(paths)
    assert store.shard_starts.tolist() == bounds
    idx = np.asarray(
        data.draw(st.lists(st.integers(0, N - 1), unique=True, max_size=12), label="index"),
        dtype=np.int64,
    )
    extra = data.draw(
        st.tuples(st.integers(1, 20), st.integers(0, 20), st.integers(1, 3)), label="padding"
    )
    shape = (
        int(single.n_node[idx].sum()) + extra[0],
        int(single.n_edge[idx].sum()) + extra[1],
        max(2, len(idx) + extra[2]),
    )
    layout = data.draw(st.sampled_from(["torch", "jraph"]), label="layout")
    cutoff = data.draw(st.sampled_from([None, 1.5]), label="cutoff")
    options = {"layout": layout, "cutoff": cutoff}
    assert_same_padded(
        single.read_batch(idx, shape, **options), store.read_batch(idx, shape, **options)
    )
    for i in idx[:3]:
        a, b = single.read_graph(int(i)), store.read_graph(int(i))
        assert all(np.array_equal(a[k], b[k]) for k in a)
    lo, hi = sorted(data.draw(st.tuples(st.integers(0, N), st.integers(0, N)), label="range"))
    x, y = single.arrays(lo, hi), store.arrays(lo, hi)
    assert np.array_equal(x.edge_index, y.edge_index) and np.array_equal(x.n_node, y.n_node)
    assert all(np.array_equal(v, y.node[k]) for k, v in x.node.items())


def test_shards_outside_the_manifest_folder_or_disagreeing_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    p0 = write_store(tmp_path / "a" / "s0.h5", [GRAPHS.take(np.arange(10))], name="t")
    p1 = write_store(tmp_path / "s1.h5", [GRAPHS.take(np.arange(10, 20))], name="t")
    with pytest.raises(ValueError, match="not in the manifest's folder"):
        write_manifest_of_shards(tmp_path / "m.json", [p1, p0], name="t", meta={}, build={})
    other = GraphArrays(
        n_node=GRAPHS.n_node[:5],
        n_edge=GRAPHS.n_edge[:5],
        edge_index=GRAPHS.take(np.arange(5)).edge_index,
        node={"z": GRAPHS.take(np.arange(5)).node["z"]},
    )
    p2 = write_store(tmp_path / "s2.h5", [other], name="t")
    with pytest.raises(ValueError, match=r"s2.h5.*has fields"):
        write_manifest_of_shards(tmp_path / "m.json", [p1, p2], name="t", meta={}, build={})
    assert not (tmp_path / "m.json").exists()


def test_manifest_from_facts_refuses_a_shard_replaced_after_its_writer_read_it(tmp_path):
    """The build's driver opens no shard: it writes the manifest from what each writer read
    (`shard_facts`) and checks that the file on disk is still that file."""
    paths = [
        write_store(tmp_path / f"s{k}.h5", [GRAPHS.take(np.arange(a, b))], name="t")
        for k, (a, b) in enumerate([(0, 10), (10, 25)])
    ]
    facts = [shard_facts(p) for p in paths]
    assert [f.entry.n_graph for f in facts] == [10, 15]
    assert facts[1].entry.uuid == GraphStore(paths[1]).uuid
    # a second writer of the same records renames another file of the same size over shard 1
    write_store(paths[1], [GRAPHS.take(np.arange(10, 25))], name="t")
    assert paths[1].stat().st_size == facts[1].entry.bytes
    with pytest.raises(
        ValueError,
        match=r"shard 1 \(s1.h5\) on disk is not the store its "
        r"writer reported.*written twice",
    ):
        write_manifest_of_facts(tmp_path / "m.json", facts, name="t", meta={}, build={})
    paths[0].unlink()
    with pytest.raises(ValueError, match=r"shard 0 \(s0.h5\) is gone"):
        write_manifest_of_facts(tmp_path / "m.json", facts, name="t", meta={}, build={})
    assert not (tmp_path / "m.json").exists()
    write_store(paths[0], [GRAPHS.take(np.arange(0, 10))], name="t")
    facts = [shard_facts(p) for p in paths]
    write_manifest_of_facts(tmp_path / "m.json", facts, name="t", meta={}, build={})
    store = open_store(tmp_path / "m.json", verify=True)
    assert np.array_equal(store.n_node, GRAPHS.n_node[:25])
    assert np.array_equal(store.n_edge, GRAPHS.n_edge[:25])


def test_open_store_picks_the_kind_of_store_by_the_file(tmp_path):
    """`open_store` opens a store file as a `GraphStore` and a manifest as a
    `ShardedGraphStore` (by content, not name); both are graph sources with the same options,
    and pickle to copies of their own kind. ``GraphStore(manifest)`` refuses in one line
    naming `open_store`."""
    import pickle

    from graphbatch._source import GraphSource

    one = write_store(tmp_path / "one.h5", [GRAPHS], name="t")
    shards = [
        write_store(tmp_path / f"s{k}.h5", [GRAPHS.take(np.arange(a, b))], name="t")
        for k, (a, b) in enumerate(((0, 15), (15, N)))
    ]
    manifest = tmp_path / "m.json"
    write_manifest_of_shards(manifest, shards, name="t", meta={}, build={})
    disguised = tmp_path / "m.h5"  # a manifest under a store's name is still a manifest
    disguised.write_bytes(manifest.read_bytes())
    for path, kind in ((one, GraphStore), (manifest, ShardedGraphStore)):
        for store in (
            open_store(path, cache_size=3),
            open_store(path=path, cache_size=3),
            kind(path, cache_size=3),
        ):
            assert type(store) is kind and store.cache_size == 3 and len(store) == N
            assert isinstance(store, GraphSource)
            copy = pickle.loads(pickle.dumps(store))
            assert type(copy) is kind and copy.uuid == store.uuid
            assert np.array_equal(copy.n_node, store.n_node)
    assert type(open_store(tmp_path / "m.h5")) is ShardedGraphStore
    for path in (manifest, disguised):
        with pytest.raises(StoreFormatError, match=r"open_store\(path\)") as err:
            GraphStore(path)
        assert str(path) in str(err.value) and len(str(err.value).splitlines()) == 1
    with pytest.raises(TypeError):
        open_store(one, cache_sise=3)
    for opener in (open_store, GraphStore, ShardedGraphStore):
        with pytest.raises(OSError):
            opener(tmp_path / "missing.h5")
