"""Check that every rank of a ``torch.distributed`` job planned the same epoch.

graphbatch never sends a plan between processes: each rank plans alone from
``(sizes, strategy, options, seed, epoch, world_size)``. That is only correct when every node
has the same size table (store), the same plan arguments and the same graphbatch. The digests
and their comparison are the core's (`graphbatch._consistency`); this module all-gathers them
over a process group. `PlanLoader` / `PlanBatchSampler` run the check at the start of every
pass when ``torch.distributed`` is initialised (``verify_plan=True``, the default);
`check_plan_consistency` runs it by hand (with ``extra`` values of your own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._consistency import (
    COMPONENTS,
    check_rows,
    digest_row,
    extra_digest,
    plan_digest,
    request_digest,
    sizes_digest,
    text_digest,
    version_digest,
)
from .._errors import InputTypeError, PlanMismatchError
from .._plan import BatchPlan
from .._sizes import GraphSizes

__all__ = [
    "COMPONENTS",
    "PlanMismatchError",
    "check_plan_consistency",
    "consistency_digests",
    "plan_digest",
    "sizes_digest",
    "torch_gather",
]


def torch_gather(group: Any = None) -> Callable[[np.ndarray], np.ndarray]:
    """``row -> rows``: all-gather one int64 row per rank over ``group`` (default: the default
    process group). With the NCCL backend the row travels in a tensor on the current CUDA device
    (``torch.cuda.set_device`` first, as for any NCCL job)."""
    import torch
    import torch.distributed as dist

    def gather(row: np.ndarray) -> np.ndarray:
        device = torch.device("cpu")
        if dist.get_backend(group) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        mine = torch.from_numpy(np.ascontiguousarray(row, dtype=np.int64)).to(device)
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, mine, group=group)
        return np.stack([g.cpu().numpy() for g in gathered])

    return gather


def _source_parts(source: Any) -> tuple[BatchPlan, GraphSizes | None, int, int]:
    """(plan, sizes or None, loader rank or -1, start batch or -1) of a BatchPlan,
    PlanBatchSampler or PlanLoader."""
    if isinstance(source, BatchPlan):
        return source, None, -1, -1
    sampler = getattr(source, "plan_sampler", None)  # PlanLoader -> its PlanBatchSampler
    if sampler is None:
        sampler = getattr(source, "sampler", source)
        sampler = getattr(sampler, "batch_sampler", sampler)  # PlanGraphSampler -> its sampler
    plan = getattr(source, "plan", None)
    sizes = getattr(sampler, "sizes", None)
    if not isinstance(plan, BatchPlan) or not isinstance(sizes, GraphSizes):
        raise InputTypeError(
            "check_plan_consistency needs a BatchPlan, a PlanLoader or a PlanBatchSampler, got "
            f"{type(source).__name__}"
        )
    rank = getattr(sampler, "rank", None)
    cursor = getattr(sampler, "cursor", None)
    start = int(cursor.offset) if cursor is not None else -1
    return plan, sizes, -1 if rank is None else int(rank), start


def consistency_digests(source: Any, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The digests `check_plan_consistency` compares, by component name (`COMPONENTS`).

    ``source``: a `BatchPlan`, or a `PlanLoader`/`PlanBatchSampler` (its current epoch's plan and
    its size table). ``extra``: anything else every rank must agree on (e.g. the checkpoint
    step it resumes from, model hyperparameters); values are compared as canonical JSON."""
    plan, sizes, _, _ = _source_parts(source)
    return {
        "graphbatch version": version_digest(),
        "size table": sizes_digest(sizes) if sizes is not None else text_digest("no sizes"),
        "plan request": request_digest(plan),
        "plan": plan_digest(plan),
        "extra": extra_digest(extra),
    }


def check_plan_consistency(
    source: Any, *, group: Any = None, extra: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """All-gather `consistency_digests` over ``group`` (default: the default process group) and
    raise `PlanMismatchError` on every rank if any component differs between ranks, if a
    loader's plan is for another world size than the group's, if loader ranks are not the
    group's ranks, or if the loaders' next passes start at different batches. The message names
    the ranks that disagree. Returns this rank's digests when everything agrees.

    A collective: call it on every rank at the same point (e.g. after building the loader and
    loading a checkpoint, before the first step). A loader runs the same check by itself at the
    start of every pass (``verify_plan=True``); call this one for ``extra`` values of your own.
    With the NCCL backend the digests travel in a tensor on the current CUDA device
    (``torch.cuda.set_device`` first, as for any NCCL job)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("check_plan_consistency needs an initialised torch.distributed group")
    plan, _, loader_rank, start = _source_parts(source)
    digests = consistency_digests(source, extra)
    row = digest_row(
        digests,
        loader_rank=loader_rank,
        plan_world=plan.world_size,
        epoch=int(plan.meta.get("epoch", -1)),
        start=start,
    )
    rows = torch_gather(group)(row)
    check_rows(rows, world=rows.shape[0], epoch=plan.meta.get("epoch"))
    return digests
