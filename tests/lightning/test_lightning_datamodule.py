"""`graphbatch.lightning.GraphDataModule`: splits by index, every strategy, a graph store on its
batch path, Lightning's fit/validate/test/predict in one process, and 2 CPU processes under
``ddp`` (tests/_lightning_script.py, as in tests/torch/test_torch_lightning.py, which also runs the
module under ``ddp_spawn``): every training graph exactly once per epoch across ranks, epochs
differ, validation sees every validation graph once per epoch, and a run resumed mid-epoch or
at an epoch boundary trains on exactly the batches of the uninterrupted plan.

The expected batches are computed here independently: ``graphbatch.plan`` over the training
split's sizes with ``world_size=2``, mapped to dataset indices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")

import graphbatch as gb
import graphbatch.torch as gt
from graphbatch.lightning import GraphDataModule
from graphbatch.torch._store_collate import StoreCollater

from .._torch_graphs import molecules, sizes_of

SCRIPT = Path(__file__).resolve().parents[1] / "_lightning_script.py"
GRAPHS = dict(n_graphs=40, seed=8, max_nodes=9)  # as in the script
PLAN = dict(batch_size=6, seed=3)  # as the script's LOADER
N_VAL = 10  # the script's --val: the last 10 graphs validate, the first 30 train
TRAIN = np.arange(GRAPHS["n_graphs"] - N_VAL)
VAL = np.arange(GRAPHS["n_graphs"] - N_VAL, GRAPHS["n_graphs"])
DDP = ["--strategy", "ddp", "--build", "after", "--val", str(N_VAL)]
STOP_MID = 4  # global steps before the mid-epoch checkpoint (3 steps per epoch and rank)


def _ids(batch) -> list[int]:
    return batch.graph_index[batch.graph_mask].tolist()


def _epoch(loader) -> list[list[int]]:
    return [_ids(b) for b in loader]


# ------------------------------------------------------------------ in one process
@pytest.fixture(scope="module")
def graphs():
    return molecules(**GRAPHS)


@pytest.mark.parametrize("strategy", gb.strategy_names())
def test_every_strategy_every_split_once_per_epoch(graphs, strategy):
    dm = GraphDataModule(
        graphs,
        val=range(24, 32),
        test=range(32, 40),
        predict=range(40),
        strategy=strategy,
        batch_size=5,
        seed=2,
    )
    assert dm.indices("train").tolist() == list(range(24))
    train = dm.train_dataloader()
    assert dm.train_dataloader() is train  # built once, reused on reload
    epochs = [_epoch(train) for _ in range(2)]
    for e in epochs:
        assert sorted(i for b in e for i in b) == list(range(24))
    assert epochs[0] != epochs[1]  # each epoch has its own plan
    for split, want in (("val", range(24, 32)), ("test", range(32, 40)), ("predict", range(40))):
        loader = dm.dataloader(split)
        assert not loader.plan_sampler.shuffle  # evaluation is planned with shuffle=False
        for _ in range(2):  # each pass (Lightning: each validation run) has every graph once
            assert sorted(i for b in _epoch(loader) for i in b) == list(want), split
    if gb.get_strategy(strategy).uses_budget and gb.get_strategy(strategy).fixed_shape:
        shapes = {
            tuple(s.tolist())
            for loader in (train, dm.val_dataloader())
            for s in loader.plan.shapes()
        }
        assert len(shapes) == 1  # evaluation batches have the training shape: one compile


def test_train_defaults_to_the_graphs_outside_val_and_test(graphs):
    dm = GraphDataModule(graphs, val=[3, 1], test=np.array([39]), batch_size=4)
    assert dm.indices("train").tolist() == [0, 2, *range(4, 39)]
    assert GraphDataModule(graphs, batch_size=4).indices("train").tolist() == list(range(40))
    assert GraphDataModule(graphs, batch_size=4).val_dataloader() == []  # no validation


def test_batches_match_the_plan_of_the_split(graphs):
    dm = GraphDataModule(graphs, train=TRAIN, val=VAL, **PLAN)
    sizes = sizes_of(graphs).subset(TRAIN)
    loader = dm.train_dataloader()
    for epoch in range(2):
        p = gb.plan(sizes, "dynamic", epoch=epoch, **PLAN)
        assert _epoch(loader) == [TRAIN[p.batch(b)].tolist() for b in range(len(p))]


def test_bad_arguments_are_one_line_errors(graphs):
    with pytest.raises(gb.UnknownNameError, match="nope"):
        GraphDataModule(graphs, strategy="nope", batch_size=4)
    with pytest.raises(ValueError, match="val holds 40, out of range for 40 graphs"):
        GraphDataModule(graphs, val=[0, 40], batch_size=4)
    with pytest.raises(ValueError, match="test holds 5 2 times"):
        GraphDataModule(graphs, test=[5, 6, 5], batch_size=4)
    with pytest.raises(ValueError, match="train is empty"):
        GraphDataModule(graphs, train=[], batch_size=4)
    with pytest.raises(TypeError, match="train=, val="):
        GraphDataModule(graphs, batch_size=4, indices=[1, 2])
    with pytest.raises(ValueError, match="no test split: pass test=indices"):
        GraphDataModule(graphs, batch_size=4).test_dataloader()
    with pytest.warns(UserWarning, match="2 graphs are in both train and val"):
        GraphDataModule(graphs, train=range(10), val=range(8, 12), batch_size=4)


@pytest.mark.parametrize("dataset", [b"store.h5", bytearray(b"store.h5"), memoryview(b"x")])
def test_a_bytes_path_is_a_type_error_at_construction(dataset):
    """Bytes have a length and items, so they passed as a "dataset" and failed with an
    AttributeError when the loader was built (issue 37)."""
    with pytest.raises(gb.InputTypeError, match=r"dataset .* got bytes|got bytearray|memoryview"):
        GraphDataModule(dataset, batch_size=4)


def test_a_resume_state_of_another_split_is_refused(graphs):
    first = GraphDataModule(graphs, train=range(30), **PLAN).train_dataloader()
    other = GraphDataModule(graphs, train=range(1, 31), **PLAN).train_dataloader()
    next(iter(first))
    with pytest.raises(ValueError, match="state was saved with indices_sha256"):
        other.load_state_dict(first.state_dict())
    same = GraphDataModule(graphs, train=range(30), **PLAN).train_dataloader()
    same.load_state_dict(first.state_dict())
    whole = _epoch(GraphDataModule(graphs, train=range(30), **PLAN).train_dataloader())
    assert _epoch(same) == whole[1:]  # the rest of the epoch, where first left off


def test_a_graph_store_keeps_its_batch_path(tmp_path, graphs):
    pytest.importorskip("h5py")
    from graphbatch.datasets import GraphArrays, GraphStore, write_store

    arrays = GraphArrays(
        n_node=[g.num_nodes for g in graphs],
        n_edge=[g.num_edges for g in graphs],
        edge_index=np.concatenate([g.edge_index.numpy() for g in graphs], axis=1),
        node={"z": np.concatenate([g.z.numpy() for g in graphs])},
        graph={"y": np.concatenate([g.y.numpy() for g in graphs])},
    )
    path = write_store(tmp_path / "g.h5", [arrays], name="t")
    dm = GraphDataModule(str(path), val=VAL, strategy="pack-lpf", batch_size=5, seed=1)
    assert isinstance(dm.dataset, GraphStore)
    loader = dm.train_dataloader()
    assert isinstance(loader.collate_fn, StoreCollater)  # no per-graph objects
    batches = list(loader)
    assert sorted(i for b in batches for i in _ids(b)) == TRAIN.tolist()
    for b in batches:  # the store's own graphs under their store indices
        for slot, i in enumerate(b.graph_index.tolist()):
            if b.graph_mask[slot]:
                assert b.z[b.batch == slot].tolist() == graphs[i].z.tolist()
    assert sorted(i for b in dm.val_dataloader() for i in _ids(b)) == VAL.tolist()


def test_fit_validate_test_predict_in_one_process(graphs):
    import lightning as L
    import torch
    from torch_geometric.nn import global_add_pool

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(16, 4)
            self.out = torch.nn.Linear(4, 1)
            self.seen: dict[str, list[int]] = {"train": [], "val": [], "test": []}

        def forward(self, batch):
            return self.out(global_add_pool(self.emb(batch.z), batch.batch)).squeeze(-1)

        def _loss(self, batch, split):
            self.seen[split] += _ids(batch)
            return gt.masked_mean((self(batch) - batch.y[:, 0]) ** 2, batch.graph_mask)

        def training_step(self, batch, batch_idx):
            return self._loss(batch, "train")

        def validation_step(self, batch, batch_idx):
            self._loss(batch, "val")

        def test_step(self, batch, batch_idx):
            self._loss(batch, "test")

        def predict_step(self, batch, batch_idx):
            return batch.graph_index[batch.graph_mask], self(batch)[batch.graph_mask]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    dm = GraphDataModule(
        graphs,
        val=range(30, 35),
        test=range(35, 40),
        predict=range(40),
        strategy="pack-lpf",
        batch_size=6,
        seed=1,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    model = Model()
    trainer.fit(model, datamodule=dm)
    assert sorted(model.seen["train"]) == sorted(list(range(30)) * 2)
    assert sorted(model.seen["val"]) == sorted(list(range(30, 35)) * 2)
    trainer.test(model, datamodule=dm)
    assert sorted(model.seen["test"]) == list(range(35, 40))
    out = trainer.predict(model, datamodule=dm)
    assert sorted(torch.cat([ids for ids, _ in out]).tolist()) == list(range(40))


def test_importing_without_lightning_names_what_to_install():
    code = (
        "import sys; sys.modules['lightning'] = None; sys.modules['pytorch_lightning'] = None\n"
        "import graphbatch.lightning"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: graphbatch.lightning needs Lightning: pip install "
        "'graphbatch[lightning]' (or: pip install lightning)"
    )
    assert "During handling" not in res.stderr  # one error, not a chain


# ------------------------------------------------------------------ 2 processes, ddp
def _start(args, out: Path, tag: str):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    with open(out / f"{tag}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), *args, "--out", str(out), "--tag", tag],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _wait(proc, out: Path, tag: str) -> None:
    try:
        rc = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    if rc != 0:
        pytest.fail(
            f"Lightning run {tag} failed ({rc}):\n" + (out / f"{tag}.log").read_text()[-4000:]
        )


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """Two interrupted ``ddp`` runs (a checkpoint mid-epoch 1; one at the end of epoch 0), then
    each resumed to 3 epochs."""
    out = tmp_path_factory.mktemp("datamodule")
    stops = {
        "mid-stop": _start(
            [*DDP, "--epochs", "3", "--max-steps", str(STOP_MID), "--ckpt-every", str(STOP_MID)],
            out,
            "mid-stop",
        ),
        "end-stop": _start([*DDP, "--epochs", "1", "--ckpt-epoch"], out, "end-stop"),
    }
    for tag, proc in stops.items():
        _wait(proc, out, tag)
    checkpoints = {"mid": out / f"step={STOP_MID}.ckpt", "end": out / "end-stop-epoch=0.ckpt"}
    resumes = {
        f"{kind}-resume": _start(
            [*DDP, "--epochs", "3", "--resume", str(ckpt)], out, f"{kind}-resume"
        )
        for kind, ckpt in checkpoints.items()
    }
    for tag, proc in resumes.items():
        _wait(proc, out, tag)
    return out


def _records(out: Path, tag: str, rank: int, val: bool = False) -> dict[int, list[list[int]]]:
    """epoch -> the batches (dataset indices) that rank trained (validated) on, in order."""
    by_epoch: dict[int, list[list[int]]] = {}
    name = f"{tag}_val_rank{rank}.json" if val else f"{tag}_rank{rank}.json"
    for epoch, _, ids, _ in json.loads((out / name).read_text()):
        by_epoch.setdefault(epoch, []).append(ids)
    return by_epoch


def _expected(epoch: int, rank: int) -> list[list[int]]:
    sizes = sizes_of(molecules(**GRAPHS)).subset(TRAIN)
    p = gb.plan(sizes, "dynamic", epoch=epoch, world_size=2, **PLAN)
    return [TRAIN[p.batch(b)].tolist() for b in p.rank_batches(rank)]


def _joined(out: Path, stop: str, resume: str, val: bool = False):
    """Per rank: epoch -> batches of the stopped run followed by the resumed run."""
    joined = []
    for r in range(2):
        a, b = _records(out, stop, r, val), _records(out, resume, r, val)
        joined.append({e: a.get(e, []) + b.get(e, []) for e in sorted({*a, *b})})
    return joined


def test_ddp_every_graph_once_per_epoch_and_epochs_differ(ddp_runs):
    per_rank = _joined(ddp_runs, "mid-stop", "mid-resume")
    for e in range(3):
        seen = sorted(i for rec in per_rank for batch in rec[e] for i in batch)
        assert seen == TRAIN.tolist(), f"epoch {e}"
        for r in range(2):
            assert per_rank[r][e] == _expected(e, r)
    orders = [[i for rec in per_rank for batch in rec[e] for i in batch] for e in range(3)]
    assert orders[0] != orders[1] != orders[2]


def test_ddp_validation_sees_every_graph_once_per_epoch(ddp_runs):
    per_rank = _joined(ddp_runs, "mid-stop", "mid-resume", val=True)
    assert all(sorted(rec) == [0, 1, 2] for rec in per_rank)
    for e in range(3):
        seen = sorted(i for rec in per_rank for batch in rec[e] for i in batch)
        assert seen == VAL.tolist(), f"epoch {e}"


def test_ddp_resume_mid_epoch_is_exact(ddp_runs):
    steps = len(_expected(0, 0))
    assert steps < STOP_MID < 2 * steps  # the checkpoint is mid-epoch 1
    for r in range(2):
        stopped = _records(ddp_runs, "mid-stop", r)
        resumed = _records(ddp_runs, "mid-resume", r)
        assert stopped[1] == _expected(1, r)[: STOP_MID - steps]
        assert 0 not in resumed
        assert resumed[1] == _expected(1, r)[STOP_MID - steps :]  # continues with the next batch
        assert resumed[2] == _expected(2, r)


def test_ddp_resume_at_an_epoch_boundary_is_exact(ddp_runs):
    for r in range(2):
        stopped = _records(ddp_runs, "end-stop", r)
        resumed = _records(ddp_runs, "end-resume", r)
        assert sorted(stopped) == [0] and stopped[0] == _expected(0, r)
        assert sorted(resumed) == [1, 2]
        assert resumed[1] == _expected(1, r)
        assert resumed[2] == _expected(2, r)
