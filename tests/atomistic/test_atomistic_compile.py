"""MACE compiled with its own recipe (`mace.tools.compile.prepare`, positions requiring grad
before the call) over padded loader batches: one Dynamo graph for the whole epoch (no graph
break, no recompilation) and MACE's eager outputs. Dynamo's ``eager`` backend keeps the test
short; the inductor compile time is measured in benchmarks (docs/atomistic.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace.modules")  # mace-torch, importable (it needs matplotlib)
gt = pytest.importorskip("graphbatch.torch")
ga = pytest.importorskip("graphbatch.atomistic")

from .._mace_graphs import R_MAX, qm9_graphs, small_model  # noqa: E402


@pytest.mark.slow
def test_mace_prepare_compiles_once_over_padded_batches():
    from torch._dynamo.testing import CompileCounterWithBackend

    graphs = qm9_graphs(10)
    model = small_model("compiled")
    eager = small_model("MACE")  # same seed: same parameters
    for (k, p), (k2, p2) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        assert k == k2 and torch.equal(p, p2)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    step = torch.compile(model, backend=counter, dynamic=False)
    loader = gt.loader(
        graphs, strategy="dynamic", batch_size=4, seed=0, preset=ga.mace(r_max=R_MAX)
    )
    shapes = set()
    n_batches = 0
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in loader:
            shapes.add(tuple(batch["positions"].shape) + tuple(batch["edge_index"].shape))
            ref_in = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
            batch["positions"].requires_grad_(True)  # prepare_graph skips it when compiling
            out = step(batch, training=True)
            loss = ga.energy_force_loss(out, batch)
            loss.backward()
            ref = eager(ref_in, training=True)
            assert torch.equal(out["energy"], ref["energy"])
            assert (out["forces"] - ref["forces"]).abs().max() <= 1e-12
            n_batches += 1
    assert n_batches >= 3 and len(shapes) == 1
    assert counter.frame_count == 1  # one graph, compiled once for the epoch
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in model.parameters()
        if p.requires_grad
    )
