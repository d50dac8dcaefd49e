"""Start-up check that every rank of a distributed job planned the same epoch.

graphbatch never sends a plan between processes: each rank plans alone from
``(sizes, strategy, options, seed, epoch, world_size)``. That is only correct when every node
has the same size table (store), the same plan arguments and the same graphbatch.
`check_plan_consistency` all-gathers SHA-256 digests of those inputs and of the resulting plan,
and raises `PlanMismatchError` on every rank (the same message everywhere, so no rank is left
waiting in a collective) when any of them differ.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from .._io import json_default
from .._plan import BatchPlan
from .._sizes import GraphSizes

__all__ = ["PlanMismatchError", "check_plan_consistency", "plan_digest", "sizes_digest",
           "consistency_digests"]

#: Components compared across ranks, in this order (the names used in error messages).
COMPONENTS = ("graphbatch version", "size table", "plan request", "plan", "extra")
_DIGEST_BYTES = 32  # SHA-256
_WORDS = _DIGEST_BYTES // 8


class PlanMismatchError(RuntimeError):
    """Ranks of one job hold different plans (or inputs to them); raised on every rank."""


def _update_array(h: Any, name: str, a: np.ndarray | None) -> None:
    h.update(name.encode())
    if a is None:
        h.update(b"\x00none")
        return
    a = np.ascontiguousarray(a, dtype="<i8")
    h.update(f"[{a.shape[0]}]".encode())
    h.update(a.tobytes())


def _request_meta(plan: BatchPlan) -> dict[str, Any]:
    """The plan's metadata without timing entries (they differ between identical plans)."""
    return {k: v for k, v in plan.meta.items() if not k.endswith("_seconds")}


def plan_digest(plan: BatchPlan) -> str:
    """SHA-256 (hex) of everything that defines a plan: every per-batch array (order, offsets,
    padded and real shapes, costs, ranks, steps, skipped graphs) and its metadata except timings.

    Equal digests mean equal batches, shapes and rank assignments, byte for byte."""
    if not isinstance(plan, BatchPlan):
        raise TypeError(f"plan must be a BatchPlan, got {type(plan).__name__}")
    h = hashlib.sha256(b"graphbatch-plan-v1")
    for name in ("order", "offsets", "pad_nodes", "pad_edges", "pad_graphs", "skipped",
                 "real_nodes", "real_edges", "real_cost", "rank", "step"):
        _update_array(h, name, getattr(plan, name))
    h.update(json.dumps(_request_meta(plan), sort_keys=True, default=json_default).encode())
    return h.hexdigest()


def sizes_digest(sizes: GraphSizes) -> str:
    """SHA-256 (hex) of a size table: ``n_node``, ``n_edge`` and ``n_bytes`` (when present)."""
    if not isinstance(sizes, GraphSizes):
        raise TypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    h = hashlib.sha256(b"graphbatch-sizes-v1")
    for name in ("n_node", "n_edge", "n_bytes"):
        _update_array(h, name, getattr(sizes, name))
    return h.hexdigest()


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _source_parts(source) -> tuple[BatchPlan, GraphSizes | None, int]:
    """(plan, sizes or None, loader rank or -1) of a BatchPlan, PlanBatchSampler or PlanLoader."""
    if isinstance(source, BatchPlan):
        return source, None, -1
    sampler = getattr(source, "sampler", source)  # PlanLoader -> its PlanBatchSampler
    plan = getattr(source, "plan", None)
    sizes = getattr(sampler, "sizes", None)
    if not isinstance(plan, BatchPlan) or not isinstance(sizes, GraphSizes):
        raise TypeError(
            "check_plan_consistency needs a BatchPlan, a PlanLoader or a PlanBatchSampler, got "
            f"{type(source).__name__}"
        )
    rank = getattr(sampler, "rank", None)
    return plan, sizes, -1 if rank is None else int(rank)


def consistency_digests(source, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The digests `check_plan_consistency` compares, by component name (`COMPONENTS`).

    ``source``: a `BatchPlan`, or a `PlanLoader`/`PlanBatchSampler` (its current epoch's plan and
    its size table). ``extra``: anything else every rank must agree on (e.g. the checkpoint
    step it resumes from, model hyperparameters); values are compared as canonical JSON."""
    from .. import __version__

    plan, sizes, _ = _source_parts(source)
    extra_json = json.dumps(dict(extra or {}), sort_keys=True, default=json_default)
    return {
        "graphbatch version": _text_digest(__version__),
        "size table": sizes_digest(sizes) if sizes is not None else _text_digest("no sizes"),
        "plan request": _text_digest(
            json.dumps(_request_meta(plan), sort_keys=True, default=json_default)),
        "plan": plan_digest(plan),
        "extra": _text_digest(extra_json),
    }


def _groups(values: list[str]) -> str:
    """'ranks 0,1: ab12cd34; ranks 2,3: 99ffee00' (first 8 hex digits)."""
    by: dict[str, list[int]] = {}
    for r, v in enumerate(values):
        by.setdefault(v, []).append(r)
    return "; ".join(
        f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))}: {v[:8]}"
        for v, rs in by.items()
    )


def check_plan_consistency(source, *, group=None,
                           extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """All-gather `consistency_digests` over ``group`` (default: the default process group) and
    raise `PlanMismatchError` on every rank if any component differs between ranks, if a
    loader's plan is for another world size than the group's, or if loader ranks are not the
    group's ranks. Returns this rank's digests when everything agrees.

    A collective: call it on every rank at the same point (e.g. after building the loader and
    loading a checkpoint, before the first step). With the NCCL backend the digests travel in a
    tensor on the current CUDA device (``torch.cuda.set_device`` first, as for any NCCL job)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("check_plan_consistency needs an initialised torch.distributed group")
    plan, _, loader_rank = _source_parts(source)
    digests = consistency_digests(source, extra)
    world = dist.get_world_size(group)
    words = np.concatenate(
        [np.frombuffer(bytes.fromhex(digests[c]), dtype="<i8") for c in COMPONENTS]
        + [np.array([loader_rank, plan.world_size], dtype="<i8")]
    )
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.from_numpy(words.astype(np.int64)).to(device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    rows = np.stack([g.cpu().numpy() for g in gathered])  # [world, components * 4 + 2]

    problems = []
    for i, name in enumerate(COMPONENTS):
        block = rows[:, i * _WORDS:(i + 1) * _WORDS]
        if (block != block[0]).any():
            values = [block[r].astype("<i8").tobytes().hex() for r in range(world)]
            problems.append(f"{name} differs ({_groups(values)})")
    loader_ranks, plan_worlds = rows[:, -2], rows[:, -1]
    if not problems and int(plan_worlds[0]) != world:
        problems.append(f"the plan is for world_size={int(plan_worlds[0])} but the process group "
                        f"has {world} ranks")
    if (loader_ranks >= 0).all() and sorted(loader_ranks.tolist()) != list(range(world)):
        problems.append(f"loader ranks by process-group rank are {loader_ranks.tolist()}, "
                        f"expected each of 0..{world - 1} once")
    if problems:
        epoch = plan.meta.get("epoch")
        raise PlanMismatchError(
            f"graphbatch plan consistency check failed across {world} ranks (epoch {epoch}): "
            + "; ".join(problems)
            + ". Every node needs the same graphbatch version, the same size table (store) "
            "and the same plan arguments (strategy, batch size/budget, seed, options)."
        )
    return digests
