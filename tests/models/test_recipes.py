"""The reference recipe that bench and tune share (`graphbatch.recipes`): the model options,
the torch and Flax builders, the padded loss, and the layering (tuning imports no bench)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphbatch.recipes import CUTOFF, model_kwargs

SRC = Path(__file__).resolve().parents[2] / "src" / "graphbatch"


@given(
    st.sampled_from(["schnet", "mpeu", "painn"]),
    st.floats(1.0, 12.0),
    st.dictionaries(st.sampled_from(["pair_edges", "hidden", "cutoff"]), st.integers(1, 9)),
)
def test_model_kwargs_options_win_over_the_defaults(name, cutoff, options):
    kw = model_kwargs(name, cutoff=cutoff, options=options)
    assert kw["cutoff"] == options.get("cutoff", cutoff)
    if name == "schnet":
        assert kw["pair_edges"] == options.get("pair_edges", True)
    else:
        assert ("pair_edges" in kw) == ("pair_edges" in options)
    assert {k: kw[k] for k in options} == options


def test_defaults():
    assert model_kwargs("mpeu") == {"cutoff": CUTOFF}
    assert model_kwargs("schnet") == {"cutoff": CUTOFF, "pair_edges": True}


def _imports(path: Path) -> set[str]:
    """Modules imported anywhere in ``path`` (relative imports resolved against graphbatch)."""
    tree = ast.parse(path.read_text())
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                out.add(node.module)
    return out


@pytest.mark.parametrize("package", ["tuning", "recipes"])
def test_no_import_of_bench(package):
    """Bench and tune share the recipe from below: neither tuning nor the recipe imports
    ``graphbatch.bench`` (not even inside a function)."""
    for path in sorted((SRC / package).glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith("graphbatch.bench")}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_torch_reference_model_is_the_bench_model():
    torch = pytest.importorskip("torch")
    from graphbatch.bench import BenchConfig, bench_model
    from graphbatch.recipes.torch import reference_model

    opts = {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}
    cfg = BenchConfig(seed=3, model_options={"schnet": opts})
    a = bench_model("schnet", cfg, repeat=2)
    b = reference_model("schnet", seed=5, options=opts)
    c = reference_model("schnet", seed=6, options=opts)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_padded_mse_ignores_padding_slots():
    torch = pytest.importorskip("torch")
    from graphbatch.recipes.torch import padded_mse

    out = torch.tensor([1.0, 2.0, 100.0], requires_grad=True)
    target = torch.tensor([0.0, 0.0, 0.0])
    mask = torch.tensor([True, True, False])
    loss = padded_mse(out, target, mask)
    assert float(loss.detach()) == pytest.approx(2.5)
    loss.backward()
    assert out.grad is not None and float(out.grad[2]) == 0.0


def test_jax_train_step_lowers_the_loss():
    pytest.importorskip("flax")
    pytest.importorskip("jraph")
    optax = pytest.importorskip("optax")
    import jax
    import jraph
    import numpy as np

    from graphbatch.jax import PaddedGraphs
    from graphbatch.jax.models import graph_inputs
    from graphbatch.recipes.jax import reference_model, train_step

    rng = np.random.default_rng(0)
    n = 5
    g = jraph.GraphsTuple(
        n_node=np.array([n], np.int32),
        n_edge=np.array([2], np.int32),
        nodes={"z": np.array([1, 6, 8, 1, 1], np.int32), "pos": rng.normal(size=(n, 3))},
        edges={},
        globals={"y": np.array([[1.5]], np.float32)},
        senders=np.array([0, 1], np.int32),
        receivers=np.array([1, 0], np.int32),
    )
    padded = jraph.pad_with_graphs(g, n + 1, 2, 2)
    pg = PaddedGraphs(
        padded,
        np.asarray(jraph.get_node_padding_mask(padded)),
        np.asarray(jraph.get_edge_padding_mask(padded)),
        np.asarray(jraph.get_graph_padding_mask(padded)),
        np.array([0, -1]),
    )
    small = {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}
    model = reference_model("schnet", options=small)
    params = model.init(jax.random.PRNGKey(0), **graph_inputs(pg))
    opt = optax.adam(1e-2)
    step = jax.jit(train_step(model, opt))
    state = opt.init(params)
    losses = []
    for _ in range(20):
        params, state, loss = step(params, state, pg)
        losses.append(float(loss))
    assert losses[-1] < losses[0]
