"""`GraphDataModule`: train/val/test/predict loaders over one dataset or store, split by index."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._sizes import GraphSizes
from .._validate import as_index_array
from ..planners import get_strategy
from ..torch import PlanLoader, loader, read_sizes

try:
    from lightning.pytorch import LightningDataModule
except ImportError:  # only the pytorch_lightning package (checked in __init__)
    from pytorch_lightning import LightningDataModule  # type: ignore[assignment]

__all__ = ["GraphDataModule"]

#: The splits, in the order Lightning's stages use them.
SPLITS = ("train", "val", "test", "predict")


class GraphDataModule(LightningDataModule):
    """Planned, padded batches of one map-style dataset or graph store, split by index, for
    every Lightning strategy (single device, ``ddp``, ``ddp_spawn``, multi-node).

    Each split's loader is a `graphbatch.torch.loader` (a `graphbatch.torch.PlanLoader`) over
    the graphs of that split, built on first use on each process and then reused (so
    ``reload_dataloaders_every_n_epochs`` rebuilds nothing). Batches keep dataset indices in
    ``batch.graph_index``.

    Args:
        dataset: a map-style dataset of PyG ``Data`` (or dicts of tensors with
            ``as_dict=True``), a `graphbatch.datasets.GraphStore` (read on the store batch
            path), or the path of a store (``.h5``, or a sharded store's ``.json`` manifest).
        train: dataset indices of the training graphs (distinct ints); default: every graph
            in neither ``val`` nor ``test``.
        val: dataset indices of the validation graphs; ``None``: no validation.
        test: dataset indices of the test graphs; ``None``: no test loader.
        predict: dataset indices of the graphs to predict; ``None``: no predict loader.
        strategy: any registered strategy (`graphbatch.strategy_names`).
        batch_size: graphs per batch, including one padding graph (`graphbatch.plan`).
        budget: the padded shape ``(n_node, n_edge, n_graph)`` instead of an estimate.
        seed: the plans' seed; epoch ``e`` of training is planned from ``(seed, e)``.
        sizes: the whole dataset's size table (default: read once, `read_sizes`).
        **loader_options: every other `graphbatch.torch.loader` argument: strategy options,
            ``on_oversize``, ``preset``, ``collation``, ``dataloader_kwargs`` (``DataLoader``
            arguments: ``{"num_workers": 2}``, ...), ...

    Training shuffles per epoch from ``(seed, epoch)`` (``shuffle`` applies to training only).
    Validation, test and prediction are planned with ``shuffle=False`` and the same strategy
    and options; for a strategy with a node/edge budget they get the training plan's padded
    shape as their budget (its one shape for fixed-shape strategies, else its budget), so a
    compiled step sees the same shapes. Under ``ddp`` every rank takes its share of every
    split's plan: each graph once per epoch across ranks, the same number of steps on every
    rank (a rank may get a padding-only batch: weigh losses with ``graph_mask``, e.g.
    `graphbatch.torch.masked_mean`).

    Resume: the training loader is stateful (`PlanLoader.state_dict`), so Lightning stores its
    epoch and position in checkpoints and a run resumed from one continues with the next batch;
    a checkpoint of another plan request or split is refused.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        train: Any = None,
        val: Any = None,
        test: Any = None,
        predict: Any = None,
        strategy: str = "dynamic",
        batch_size: int | None = None,
        budget: Budget | tuple[int, int, int] | None = None,
        seed: int = 0,
        sizes: GraphSizes | None = None,
        **loader_options: Any,
    ) -> None:
        super().__init__()
        if "indices" in loader_options:
            raise InputTypeError("GraphDataModule() takes splits as train=, val=, test=, predict=")
        get_strategy(strategy)  # an unknown name fails here, naming the registered ones
        if isinstance(dataset, (bytes, bytearray, memoryview)):  # a len and items, no graphs
            raise InputTypeError(
                "dataset must be map-style (len and [i]), a graph store or a store's path (str "
                f"or os.PathLike), got {type(dataset).__name__} {bytes(dataset[:60])!r}"
            )
        if isinstance(dataset, (str, os.PathLike)):
            from ..datasets import open_store

            dataset = open_store(dataset)
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise InputTypeError(
                f"dataset must be map-style (len and [i]) or a graph store, got "
                f"{type(dataset).__name__}"
            )
        n = len(dataset)
        if sizes is not None and len(sizes) != n:
            raise InputError(f"sizes has {len(sizes)} entries for a dataset of {n} graphs")
        self.dataset = dataset
        self.strategy = strategy
        self.batch_size = batch_size
        self.budget = budget
        self.seed = seed
        self.loader_options = dict(loader_options)
        self._sizes = sizes
        self._splits = self._resolve_splits(n, train=train, val=val, test=test, predict=predict)
        self._loaders: dict[str, PlanLoader] = {}

    @staticmethod
    def _resolve_splits(n: int, **given: Any) -> dict[str, np.ndarray | None]:
        splits: dict[str, np.ndarray | None] = {
            name: None if given[name] is None else as_index_array(given[name], name, limit=n)
            for name in SPLITS
        }
        train = splits["train"]
        held = {name: idx for name in ("val", "test") if (idx := splits[name]) is not None}
        if train is None:
            everything = np.arange(n, dtype=np.int64)
            rest = (
                np.setdiff1d(everything, np.concatenate(list(held.values())))
                if held
                else everything
            )
            splits["train"] = rest if rest.shape[0] else None
        else:
            for name, idx in held.items():
                shared = np.intersect1d(train, idx)
                if shared.shape[0]:
                    warnings.warn(
                        f"GraphDataModule: {shared.shape[0]} graphs are in both "
                        f"train and {name} (e.g. {int(shared[0])})",
                        stacklevel=3,
                    )
        return splits

    def indices(self, split: str) -> np.ndarray | None:
        """The dataset indices of ``split`` (``"train"``, ``"val"``, ``"test"``,
        ``"predict"``), or ``None`` when it has none."""
        if split not in SPLITS:
            raise InputError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        idx = self._splits[split]
        return None if idx is None else idx.copy()

    def dataloader(self, split: str) -> PlanLoader:
        """The loader of ``split``, built on first use (after the process group exists, on
        every rank) and then reused."""
        if split not in SPLITS:
            raise InputError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if split not in self._loaders:
            idx = self._splits[split]
            if idx is None:
                raise InputError(f"GraphDataModule has no {split} split: pass {split}=indices")
            if self._sizes is None:
                self._sizes = read_sizes(self.dataset)
            options = dict(self.loader_options)
            request: dict[str, Any] = {"batch_size": self.batch_size, "budget": self.budget}
            if split != "train":
                options["shuffle"] = False
                shared = self._evaluation_budget()
                if shared is not None:
                    request = {"batch_size": None, "budget": shared}
            self._loaders[split] = loader(
                self.dataset,
                strategy=self.strategy,
                seed=self.seed,
                sizes=self._sizes,
                indices=idx,
                **request,
                **options,
            )
        return self._loaders[split]

    def _evaluation_budget(self) -> Budget | None:
        """The padded shape evaluation plans share with training (see the class docstring), or
        ``None`` (the strategy takes no budget, or there is no train split)."""
        if not get_strategy(self.strategy).uses_budget or self._splits["train"] is None:
            return None
        plan = self.dataloader("train").plan
        shapes = plan.shapes()
        if shapes.shape[0] == 1:
            return Budget(*(int(v) for v in shapes[0]))
        budget = plan.meta.get("budget")
        return None if budget is None else Budget(*(int(v) for v in budget))

    # -------------------------------------------------------- Lightning's hooks
    def train_dataloader(self) -> PlanLoader:
        """The training loader (shuffled per epoch)."""
        return self.dataloader("train")

    def val_dataloader(self) -> PlanLoader | list:
        """The validation loader, or ``[]`` (no validation) without a ``val`` split."""
        return [] if self._splits["val"] is None else self.dataloader("val")

    def test_dataloader(self) -> PlanLoader:
        """The test loader (a ``ValueError`` without a ``test`` split)."""
        return self.dataloader("test")

    def predict_dataloader(self) -> PlanLoader:
        """The prediction loader (a ``ValueError`` without a ``predict`` split)."""
        return self.dataloader("predict")
