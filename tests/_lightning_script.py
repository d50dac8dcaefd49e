"""One Lightning training run for tests/torch/test_torch_lightning.py and
tests/lightning/test_lightning_datamodule.py (run as a script: Lightning's ``ddp`` launcher starts
this file again for rank 1). Each rank writes the graph indices of every batch it trained on (and,
with ``--val``, validated on) to ``OUT/TAG_rank{r}.json``. ``--build after`` uses the shipped
`graphbatch.lightning.GraphDataModule`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Run as a script, this folder (tests/) comes first on sys.path, where the test packages
# tests/torch and tests/lightning would shadow torch and lightning: import from the repo root.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from torch_geometric.nn import global_add_pool  # noqa: E402

import graphbatch.torch as gt  # noqa: E402
from graphbatch.lightning import GraphDataModule  # noqa: E402
from tests._torch_graphs import molecules  # noqa: E402

GRAPHS = dict(n_graphs=40, seed=8, max_nodes=9)
LOADER = dict(strategy="dynamic", batch_size=6, seed=3)


class Recorder(L.LightningModule):
    def __init__(self, out: str, tag: str) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)
        self.out = torch.nn.Linear(4, 1)
        self.path = out
        self.tag = tag
        self.records: list = []
        self.val_records: list = []

    def training_step(self, batch, batch_idx):
        ids = batch.graph_index[batch.graph_mask].tolist()
        self.records.append([self.current_epoch, batch_idx, ids, list(batch.z.shape)])
        pred = self.out(global_add_pool(self.emb(batch.z), batch.batch)).squeeze(-1)
        return gt.masked_mean((pred - batch.y[:, 0]) ** 2, batch.graph_mask)

    def validation_step(self, batch, batch_idx):
        ids = batch.graph_index[batch.graph_mask].tolist()
        self.val_records.append([self.current_epoch, batch_idx, ids, list(batch.z.shape)])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_end(self) -> None:
        rank = self.global_rank
        Path(self.path, f"{self.tag}_rank{rank}.json").write_text(json.dumps(self.records))
        if self.val_records:
            Path(self.path, f"{self.tag}_val_rank{rank}.json").write_text(
                json.dumps(self.val_records)
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", default="ddp")
    ap.add_argument("--build", choices=["before", "after"], default="after")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--ckpt-every", type=int, default=None)
    ap.add_argument(
        "--seed-per-rank",
        action="store_true",
        help="each rank plans with another seed (the plan check must stop the run)",
    )
    ap.add_argument(
        "--ckpt-epoch",
        action="store_true",
        help="ModelCheckpoint's default trigger: a checkpoint at every epoch's end",
    )
    ap.add_argument("--val", type=int, default=0, help="the last N graphs validate")
    ap.add_argument("--resume", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    graphs = molecules(**GRAPHS)
    devices = 1 if a.strategy == "single" else 2
    callbacks = []
    if a.ckpt_every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=a.out, every_n_train_steps=a.ckpt_every, save_top_k=-1, filename="{step}"
            )
        )
    if a.ckpt_epoch:
        callbacks.append(
            ModelCheckpoint(
                dirpath=a.out, every_n_epochs=1, save_top_k=-1, filename=a.tag + "-{epoch}"
            )
        )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="auto" if a.strategy == "single" else a.strategy,
        max_epochs=a.epochs,
        max_steps=a.max_steps,
        limit_train_batches=a.limit if a.limit else 1.0,
        reload_dataloaders_every_n_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
        num_sanity_val_steps=0,
    )
    model = Recorder(a.out, a.tag)
    options = dict(LOADER)
    if a.seed_per_rank:  # Lightning's ddp launcher starts rank 1 with LOCAL_RANK=1
        options["seed"] += int(os.environ.get("LOCAL_RANK", "0"))
    if a.build == "before":  # built before the process group exists
        loader = gt.loader(graphs, **options)
        trainer.fit(model, train_dataloaders=loader, ckpt_path=a.resume)
    else:
        n = len(graphs)
        splits = dict(val=range(n - a.val, n)) if a.val else {}
        trainer.fit(
            model, datamodule=GraphDataModule(graphs, **splits, **options), ckpt_path=a.resume
        )


if __name__ == "__main__":
    main()
