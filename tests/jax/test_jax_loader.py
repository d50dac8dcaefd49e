"""graphbatch.jax.loader: epochs, resume, prefetch thread, GraphStore source, several devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
jraph = pytest.importorskip("jraph")

import graphbatch as gb  # noqa: E402
import graphbatch.jax as gj  # noqa: E402
from graphbatch._padlayout import short_padding_batches  # noqa: E402
from graphbatch.jax._loader import step_table  # noqa: E402

from .test_jax_collate import make_graphs, sizes_of  # noqa: E402


@pytest.fixture(scope="module")
def graphs():
    return make_graphs(60, seed=3)


def epoch_indices(ld):
    """Per step: the dataset indices of its real graphs (all ranks), as host lists."""
    out = []
    for pg in ld:
        gi = np.asarray(pg.graph_index).reshape(-1)
        out.append(gi[gi >= 0].tolist())
    return out


def test_every_graph_once_per_epoch_and_epochs_differ(graphs):
    ld = gj.loader(graphs, strategy="dynamic", batch_size=8, seed=5)
    n0 = len(ld)
    e0 = epoch_indices(ld)
    assert len(e0) == n0 and ld.epoch == 1
    assert sorted(i for b in e0 for i in b) == list(range(len(graphs)))
    e1 = epoch_indices(ld)
    assert sorted(i for b in e1 for i in b) == list(range(len(graphs)))
    assert e0 != e1 and ld.epoch == 2
    # the plan is the library's plan of (seed, epoch)
    ref = gb.plan(sizes_of(graphs), "dynamic", batch_size=8, seed=5, epoch=1)
    assert e1 == [ref.batch(b).tolist() for b in range(len(ref))]
    again = gj.loader(graphs, strategy="dynamic", batch_size=8, seed=5)
    assert epoch_indices(again) == e0


def test_fixed_shape_strategy_emits_one_shape_and_masks_match(graphs):
    ld = gj.loader(graphs, strategy="pack-lpf", budget=(80, 400, 12), prefetch=0)
    shapes = set()
    for pg in ld:
        g = pg.graphs
        shapes.add((g.nodes["pos"].shape[0], g.senders.shape[0], g.n_node.shape[0]))
        np.testing.assert_array_equal(
            np.asarray(pg.node_mask), np.asarray(jraph.get_node_padding_mask(g))
        )
    assert shapes == {(80, 400, 12)}


def test_set_epoch_takes_effect_at_next_iteration_and_early_stop_advances(graphs):
    ld = gj.loader(graphs, strategy="dynamic", batch_size=8, seed=1)
    it = iter(ld)
    first = next(it)
    ld.set_epoch(7)  # the running iteration keeps epoch 0's plan
    rest = [np.asarray(pg.graph_index).tolist() for pg in it]
    ref0 = gb.plan(sizes_of(graphs), "dynamic", batch_size=8, seed=1, epoch=0)
    assert len(rest) + 1 == len(ref0)
    assert np.asarray(first.graph_index)[: len(ref0.batch(0))].tolist() == ref0.batch(0).tolist()
    assert ld.epoch == 7  # not overwritten by the old iteration's end
    for k, _ in enumerate(ld):  # stop early in epoch 7
        if k == 1:
            break
    assert ld.epoch == 8 and ld.state_dict()["offset"] == 0
    assert len(ld) == len(gb.plan(sizes_of(graphs), "dynamic", batch_size=8, seed=1, epoch=8))


@pytest.mark.parametrize("prefetch", [0, 3])
def test_state_dict_resumes_at_the_next_step(graphs, prefetch):
    def make():
        return gj.loader(graphs, strategy="dynamic", batch_size=6, seed=2, prefetch=prefetch)

    full = make()
    ref0 = epoch_indices(full)
    ref = ref0 + epoch_indices(full)
    ld = make()
    seen = []
    for k, pg in enumerate(ld):
        gi = np.asarray(pg.graph_index)
        seen.append(gi[gi >= 0].tolist())
        if k == 3:
            state = ld.state_dict()
            break
    assert state["epoch"] == 0 and state["offset"] == 4
    assert ld.epoch == 1  # stopping early ends the epoch
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON round trip
    assert len(resumed) == len(ref0) - 4
    seen += epoch_indices(resumed) + epoch_indices(resumed)
    assert seen == ref
    assert resumed.epoch == 2


def test_state_from_another_plan_request_is_refused(graphs):
    state = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=2).state_dict()
    other = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=3)
    with pytest.raises(ValueError, match="plan request"):
        other.load_state_dict(state)
    same = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=2)
    with pytest.raises(ValueError, match="past the"):
        same.load_state_dict({**state, "offset": 10_000})


def test_prefetch_thread_stops_on_early_exit_and_passes_errors(graphs):
    before = threading.active_count()
    ld = gj.loader(graphs, strategy="dynamic", batch_size=6, prefetch=2)
    it = iter(ld)
    next(it)
    it.close()
    assert threading.active_count() == before

    class Broken(list):
        def __getitem__(self, i):
            if i == 11:
                raise RuntimeError("disk on fire at graph 11")
            return list.__getitem__(self, i)

    bad = gj.loader(
        Broken(graphs), strategy="dynamic", batch_size=6, prefetch=2, sizes=sizes_of(graphs)
    )
    with pytest.raises(RuntimeError, match="graph 11"):
        epoch_indices(bad)
    assert threading.active_count() == before


def _prefetch_threads() -> int:
    return sum(t.name == "graphbatch-jax-prefetch" for t in threading.enumerate())


def test_prefetch_thread_ends_when_the_iterator_is_collected_or_the_loop_raises(graphs):
    """A dropped iterator (garbage-collected generator) and an exception raised by the training
    loop mid-epoch both stop and join the thread; the offset counts the steps received."""
    import gc

    ld = gj.loader(graphs, strategy="dynamic", batch_size=6, prefetch=2)
    it = iter(ld)
    next(it)
    assert _prefetch_threads() == 1
    del it
    gc.collect()
    assert _prefetch_threads() == 0
    ld.set_epoch(0)
    with pytest.raises(FloatingPointError):
        for k, _ in enumerate(ld):
            if k == 2:
                state = ld.state_dict()
                raise FloatingPointError("loss is nan")
    assert _prefetch_threads() == 0
    assert (state["epoch"], state["offset"]) == (0, 3)
    assert ld.epoch == 1  # stopped early: the next iteration plays the next epoch


def test_bad_arguments(graphs):
    with pytest.raises(TypeError, match="map-style"):
        gj.loader(iter(graphs), strategy="dynamic", batch_size=4)
    with pytest.raises(ValueError, match="at least one device"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, devices=[])
    with pytest.raises(TypeError, match=r"jax.Device"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, devices=["cpu:0"])
    with pytest.raises(ValueError, match="prefetch"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, prefetch=-1)
    with pytest.raises(ValueError, match="entries for a source"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, sizes=sizes_of(graphs[:5]))
    with pytest.raises(TypeError, match="takes no option"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, bogus=1)


# ------------------------------------------------------ the schedule shared with torch
def test_indices_plan_and_load_a_split_with_dataset_indices(graphs):
    """A split, as in the torch loader: only its graphs are planned (and read for sizes), every
    one once per epoch; graph_index holds source indices; the state names the split."""
    idx = np.random.default_rng(0).permutation(len(graphs))[:25]

    class Counting(list):
        reads = 0

        def __getitem__(self, i):
            Counting.reads += 1
            return list.__getitem__(self, i)

    src = Counting(graphs)
    ld = gj.loader(src, strategy="dynamic", batch_size=5, seed=2, indices=idx, prefetch=0)
    assert Counting.reads == len(idx) + 1  # the split's sizes, then the template graph
    split = sizes_of(graphs).subset(idx)
    for epoch in range(2):
        ref = gb.plan(split, "dynamic", batch_size=5, seed=2, epoch=epoch)
        assert epoch_indices(ld) == [idx[ref.batch(b)].tolist() for b in range(len(ref))]
    whole = gj.loader(
        graphs, strategy="dynamic", batch_size=5, seed=2, indices=idx, sizes=sizes_of(graphs)
    )
    assert np.array_equal(whole.plan.order, ld.plan_for_epoch(0).order)
    state = whole.state_dict()
    assert (
        state["fingerprint"]["num_graphs"] == len(idx) and "indices_sha256" in state["fingerprint"]
    )
    other = gj.loader(graphs, strategy="dynamic", batch_size=5, seed=2, indices=idx[::-1])
    with pytest.raises(gb.InputError, match="saved with indices_sha256"):
        other.load_state_dict(state)
    with pytest.raises(gb.InputError, match="indices holds 60, out of range for 60 graphs"):
        gj.loader(graphs, strategy="dynamic", batch_size=5, indices=[0, 60])


def test_spare_padding_node_gives_every_batch_two_padding_nodes(graphs):
    budget = dict(strategy="pack-lpf", budget=(40, 400, 8), seed=0, prefetch=0, cutoff=1.0)
    plan = gb.plan(sizes_of(graphs), "pack-lpf", budget=(40, 400, 8), seed=0)
    assert short_padding_batches(plan).shape[0] > 0  # batches with one padding node exist
    with pytest.warns(UserWarning, match=r"spare_padding_node=True adds one"):
        plain = gj.loader(graphs, **budget)
    assert [pg.node_mask.shape[0] for pg in plain] == [40] * len(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spare = gj.loader(graphs, spare_padding_node=True, **budget)
    assert spare.fingerprint["extra_padding_nodes"] == 1
    for b, pg in enumerate(spare):
        assert pg.node_mask.shape[0] == plan.shape(b)[0] + 1
        assert (~np.asarray(pg.node_mask)).sum() >= 2
        pad = ~np.asarray(pg.edge_mask)
        senders, receivers = np.asarray(pg.graphs.senders), np.asarray(pg.graphs.receivers)
        assert (senders[pad] != receivers[pad]).all()  # no padding self-loop
    with pytest.raises(TypeError, match="spare_padding_node must be True or False"):
        gj.loader(graphs, strategy="dynamic", batch_size=4, spare_padding_node=1)


def test_state_written_before_the_schedule_resumes():
    """A JaxPlanLoader state of graphbatch before the epoch schedule (a 16-character
    fingerprint; tests/core/test_schedule.py has the size table) still resumes exactly."""
    rng = np.random.default_rng(7)
    nodes, edges = rng.integers(3, 20, 60), rng.integers(0, 40, 60)
    old = [
        jraph.GraphsTuple(
            n_node=np.array([n]),
            n_edge=np.array([e]),
            nodes={"x": np.zeros((n, 2), np.float32)},
            edges=None,
            globals=None,
            senders=np.zeros(e, np.int32),
            receivers=np.zeros(e, np.int32),
        )
        for n, e in zip(nodes.tolist(), edges.tolist(), strict=True)
    ]
    state = {"epoch": 0, "offset": 2, "fingerprint": "e440a01fada75703", "world_size": 1}
    ld = gj.loader(old, strategy="dynamic", batch_size=6, seed=3, prefetch=0)
    ld.load_state_dict({**state, "num_graphs": 60})
    ref = gb.plan(gb.GraphSizes(nodes, edges), "dynamic", batch_size=6, seed=3, epoch=0)
    assert epoch_indices(ld) == [ref.batch(b).tolist() for b in range(2, len(ref))]
    other = gj.loader(old, strategy="dynamic", batch_size=6, seed=4, prefetch=0)
    with pytest.raises(gb.InputError, match="saved for plan request 'e440a01fada75703'"):
        other.load_state_dict(state)


def test_set_epoch_to_the_resumed_epoch_keeps_the_resume_point(graphs):
    """The usual loop calls set_epoch(epoch) after load_state_dict: it keeps the position."""
    kw = dict(strategy="dynamic", batch_size=6, seed=2, prefetch=0)
    ld = gj.loader(graphs, **kw)
    ld.set_epoch(3)
    whole = epoch_indices(ld)
    run = gj.loader(graphs, **kw)
    run.set_epoch(3)
    for k, _ in enumerate(run):
        if k == 1:
            state = run.state_dict()
            break
    resumed = gj.loader(graphs, **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    assert epoch_indices(resumed) == whole[2:]
    resumed.set_epoch(3)  # after a pass: replays epoch 3 from its start
    assert epoch_indices(resumed) == whole


@pytest.mark.requires("h5py")
def test_graph_store_source_matches_the_same_graphs_in_memory(tmp_path, graphs):
    from graphbatch.datasets import GraphArrays, GraphStore, write_store

    ga = GraphArrays(
        n_node=np.array([int(g.n_node[0]) for g in graphs]),
        n_edge=np.array([int(g.n_edge[0]) for g in graphs]),
        edge_index=np.concatenate([np.stack([g.senders, g.receivers]) for g in graphs], axis=1),
        node={
            "z": np.concatenate([g.nodes["z"] for g in graphs]),
            "pos": np.concatenate([g.nodes["pos"] for g in graphs]),
        },
        graph={"y": np.concatenate([g.globals for g in graphs])},
    )
    path = write_store(tmp_path / "g.h5", [ga], name="t")
    store = GraphStore(path)
    a = gj.loader(store, strategy="dynamic", batch_size=8, seed=4, prefetch=1)
    b = gj.loader(graphs, strategy="dynamic", batch_size=8, seed=4, prefetch=0)
    assert len(a) == len(b)
    for pa, pb in zip(a, b, strict=True):
        for key in ("z", "pos"):
            np.testing.assert_array_equal(
                np.asarray(pa.graphs.nodes[key]), np.asarray(pb.graphs.nodes[key])
            )
        np.testing.assert_array_equal(
            np.asarray(pa.graphs.globals["y"]), np.asarray(pb.graphs.globals)
        )
        np.testing.assert_array_equal(np.asarray(pa.graphs.senders), np.asarray(pb.graphs.senders))
        np.testing.assert_array_equal(np.asarray(pa.graph_index), np.asarray(pb.graph_index))


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 40),
    strategy=st.sampled_from(["dynamic", "static-constant", "static-64", "pack-lpf"]),
    batch_size=st.integers(2, 9),
    world=st.integers(1, 3),
    seed=st.integers(0, 5),
)
def test_property_every_graph_once_across_ranks(n, strategy, batch_size, world, seed):
    gs = make_graphs(n, seed=seed, max_nodes=6)
    kw = (
        {"budget": (40, 200, batch_size + 1)}
        if strategy == "pack-lpf"
        else {"batch_size": batch_size}
    )
    plan = gb.plan(sizes_of(gs), strategy, seed=seed, world_size=world, **kw)
    table = step_table(plan, world)  # what the loader iterates, one row per step
    assert table.shape == (plan.num_steps, world)
    seen = []
    for row in table:
        shapes = set()
        for b in row:
            pg = gj.make_padded(gs, plan.batch(int(b)), plan.shape(int(b)), template=gs[0])
            shapes.add((pg.graphs.senders.shape[0], pg.node_mask.shape[0], pg.graph_mask.shape[0]))
            seen += pg.graph_index[pg.graph_mask].tolist()
        assert len(shapes) == 1
    assert sorted(seen) == list(range(n))


MULTI_DEVICE = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    sys.path.insert(0, sys.argv[1])
    from tests.jax.test_jax_collate import make_graphs
    import graphbatch.jax as gj
    assert jax.device_count() == 2, jax.devices()
    out = {}
    gs = make_graphs(37, seed=9)
    ld = gj.loader(gs, strategy=sys.argv[2], batch_size=6, seed=1, devices=jax.devices())

    def loss(pg):
        g = pg.graphs
        h = g.nodes["pos"].sum(-1)
        msg = jnp.where(pg.edge_mask, h[g.senders], 0.0)
        agg = jax.ops.segment_sum(msg, g.receivers, num_segments=h.shape[0])
        return jnp.sum(jnp.where(pg.node_mask, agg, 0.0))

    @jax.jit
    def step(pg):
        return jnp.sum(jax.vmap(loss)(pg))

    seen, shapes, empty, shardings, total = [], set(), 0, set(), 0.0
    for epoch in range(2):
        for pg in ld:
            shapes.add(tuple(pg.graphs.senders.shape) + tuple(pg.node_mask.shape))
            sharding = pg.graphs.senders.sharding
            # the spec as a tuple: its repr differs between JAX versions (PartitionSpec/P)
            shardings.add(str(tuple(sharding.spec))
                          if isinstance(sharding, jax.sharding.NamedSharding) else "other")
            gi = np.asarray(pg.graph_index)
            empty += int((gi.max(axis=1) < 0).sum())
            if epoch == 0:
                seen += gi[gi >= 0].tolist()
            total += float(step(pg))
    out["seen"] = sorted(seen)
    out["leading"] = sorted({s[0] for s in shapes})
    out["shapes"] = len(shapes)
    out["shardings"] = sorted(shardings)
    out["compiles"] = step._cache_size()
    out["empty"] = empty
    # an all-padding rank: 1 graph for 2 devices (with more graphs than ranks the distributed
    # plan splits batches instead, so no rank idles)
    small = gj.loader(gs[:1], strategy="static-constant", batch_size=8, devices=jax.devices())
    pg = next(iter(small))
    out["small_graph_mask"] = np.asarray(pg.graph_mask).sum(axis=1).tolist()
    print("RESULT " + json.dumps(out))
""")


def run_two_devices(strategy: str) -> dict:
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", MULTI_DEVICE, root, strategy],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("strategy", ["static-constant", "dynamic"])
def test_two_host_devices_shard_steps_and_compile_once(strategy):
    out = run_two_devices(strategy)
    assert out["seen"] == list(range(37))  # every graph exactly once across devices
    assert out["leading"] == [2]
    assert out["shapes"] == 1  # both ranks, every step: one padded shape
    assert out["shardings"] == ["('data',)"]  # NamedSharding over the data axis
    assert out["compiles"] == 1
    assert sorted(out["small_graph_mask"]) == [0, 1]  # one rank gets an all-padding batch


FIXED = [n for n in gb.strategy_names() if gb.get_strategy(n).fixed_shape]


@pytest.mark.parametrize("strategy", FIXED)
def test_fixed_shape_strategies_compile_once_per_run_on_one_device(graphs, strategy):
    kw = (
        {"budget": (70, 500, 10)}
        if gb.get_strategy(strategy).uses_budget and strategy != "dynamic"
        else {"batch_size": 6}
    )

    @jax.jit
    def step(pg):
        g = pg.graphs
        return jax.numpy.sum(jax.numpy.where(pg.edge_mask, g.senders, 0)) + pg.node_mask.sum()

    ld = gj.loader(graphs, strategy=strategy, seed=0, prefetch=1, **kw)
    for _ in range(2):
        for pg in ld:
            step(pg)
    assert step._cache_size() == 1


def test_per_shape_strategies_compile_once_per_distinct_shape(graphs):
    @jax.jit
    def step(pg):
        return pg.node_mask.sum() + pg.edge_mask.sum()

    ld = gj.loader(graphs, strategy="static-pow2", batch_size=5, seed=0, prefetch=0)
    shapes = {tuple(map(int, s)) for e in range(2) for s in ld.plan_for_epoch(e).shapes()}
    for _ in range(2):
        for pg in ld:
            step(pg)
    assert step._cache_size() == len(shapes) > 1
