"""docs/atomistic.md: its MACE training loop runs as written and trains (the loss falls)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace")

DOC = Path(__file__).resolve().parent.parent / "docs" / "atomistic.md"


def test_mace_training_loop_runs(capsys):
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    old = torch.get_default_dtype()
    try:
        scope: dict = {}
        exec(compile(code, str(DOC), "exec"), scope)
    finally:
        torch.set_default_dtype(old)
    printed = [ln.split() for ln in capsys.readouterr().out.splitlines()
               if re.fullmatch(r"\d+ \S+", ln)]
    assert [p[0] for p in printed] == ["0", "1"]
    assert all(float(p[1]) == float(p[1]) for p in printed)  # finite, not NaN
    loader, model = scope["loader"], scope["model"]
    assert len({tuple(b["positions"].shape) for b in loader}) == 1
    # the trained model's loss over the data set, padded, equals the unpadded MACE loss
    from mace.modules.loss import WeightedEnergyForcesLoss
    from mace.tools import torch_geometric

    ga = scope["ga"]
    torch.set_default_dtype(torch.float64)
    try:
        for batch in list(loader)[:1]:
            real = batch["graph_index"][batch["graph_mask"]].tolist()
            ref = torch_geometric.Batch.from_data_list([scope["dataset"][i] for i in real])
            lp = ga.energy_force_loss(model(batch, training=True), batch, forces_weight=100.0)
            lr = WeightedEnergyForcesLoss(1.0, 100.0)(ref, model(ref.to_dict(), training=True))
            assert abs(lp.item() - lr.item()) <= 1e-12 * max(1.0, abs(lr.item()))
    finally:
        torch.set_default_dtype(old)
