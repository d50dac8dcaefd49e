"""The plan file (docs/plan-format.md): a `BatchPlan` as an uncompressed ``.npz`` of int64
arrays plus a JSON ``meta``, written by `plan_file_arrays` and read back, bounded and checked
member by member, by `read_plan_file`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._errors import InputError
from ._io import json_default, parse_json, read_npz

__all__ = [
    "OPTIONAL_INT_KEYS",
    "PLAN_FORMAT_VERSION",
    "REQUIRED_KEYS",
    "plan_file_arrays",
    "read_plan_file",
]

#: Version of the plan-file contract (docs/plan-format.md). Readers accept <= this version.
PLAN_FORMAT_VERSION = 1

#: The plan-file members every plan has, in `BatchPlan`'s positional order.
REQUIRED_KEYS = ("order", "offsets", "pad_nodes", "pad_edges", "pad_graphs", "skipped")
#: Its other integer members (``real_nodes``/``real_edges`` are required when reading).
OPTIONAL_INT_KEYS = ("real_nodes", "real_edges", "real_cost", "rank", "step")
#: Plan-file members in reading order: every length is bounded by those read before it (one
#: entry per batch, ``offsets`` one more, ``order`` as many as ``offsets[-1]`` says), so no
#: member is decompressed or allocated beyond what the others declare.
_READ_ORDER = ("pad_nodes", "pad_edges", "pad_graphs", "offsets", "order", "skipped")
_MAX_META_BYTES = 1 << 24  # 16 MiB of meta JSON (a plan's is under 1 KiB)


def _n_batches(arrays: dict) -> int | None:
    return int(arrays["pad_nodes"].shape[0]) if arrays["pad_nodes"].ndim == 1 else None


def _n_offsets(arrays: dict) -> int | None:
    n = _n_batches(arrays)
    return None if n is None else n + 1


def _order_length(arrays: dict) -> int | None:
    off = arrays["offsets"]
    if (
        off.ndim != 1
        or off.dtype.kind not in "iu"
        or off.size == 0
        or int(off[0]) != 0
        or (np.diff(off) < 0).any()
    ):
        return None  # refused by the plan's own checks after reading
    return int(off[-1])


_PLAN_LENGTHS = {
    **{
        k: _n_batches
        for k in (
            "pad_edges",
            "pad_graphs",
            "real_nodes",
            "real_edges",
            "real_cost",
            "rank",
            "step",
        )
    },
    "offsets": _n_offsets,
    "order": _order_length,
}


def plan_file_arrays(
    arrays: Mapping[str, np.ndarray | None], meta: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """The plan-file members of a plan (docs/plan-format.md) from its int64 ``arrays`` by name
    (the optional ones, ``None`` when absent, are left out) and its ``meta``, written as JSON
    with sorted keys and ``format_version``."""
    out: dict[str, np.ndarray] = {}
    for name in (*REQUIRED_KEYS, *OPTIONAL_INT_KEYS):  # real_nodes/real_edges: always present
        v = arrays.get(name)
        if v is not None:
            out[name] = v
    meta = dict(meta, format_version=PLAN_FORMAT_VERSION)
    out["meta"] = np.array(json.dumps(meta, sort_keys=True, default=json_default))
    return out


def read_plan_file(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A plan file's arrays (each 1-D int64) and its ``meta``, read member by member with
    every length bounded by those read before (`_READ_ORDER`); refuses pickled content, a
    newer format version, non-integer or multi-dimensional arrays, a ``meta`` that is not a
    JSON object, and files without ``real_nodes``/``real_edges``. Whether the arrays form a
    valid plan is `BatchPlan.validate`'s to say."""
    arrays = read_npz(
        path,
        "plan file",
        _READ_ORDER,
        (*OPTIONAL_INT_KEYS, "meta"),
        lengths=_PLAN_LENGTHS,
        max_bytes={"meta": _MAX_META_BYTES},
    )
    where = f"plan file {str(path)!r}"
    meta = _load_meta(arrays.pop("meta", None), where)
    version = meta.get("format_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError(f"{where}: meta format_version must be an integer, got {version!r}")
    if version > PLAN_FORMAT_VERSION:
        raise InputError(
            f"plan file {str(path)!r} has format version {version}; this graphbatch reads "
            f"up to {PLAN_FORMAT_VERSION}"
        )
    if "real_nodes" not in arrays or "real_edges" not in arrays:
        raise InputError(
            f"plan file {str(path)!r} lacks real_nodes/real_edges; re-plan with graphbatch"
        )
    for key in REQUIRED_KEYS + OPTIONAL_INT_KEYS:
        if key in arrays:
            arrays[key] = _int_array(arrays[key], key, where)
    return arrays, meta


def _load_meta(raw: np.ndarray | None, where: str) -> dict[str, Any]:
    """The ``meta`` JSON object of a plan file (``{}`` when absent)."""
    if raw is None:
        return {}
    if raw.dtype.kind != "U" or raw.ndim != 0:
        raise InputError(
            f"{where}: meta must be a 0-d string, got dtype {raw.dtype} shape {raw.shape}"
        )
    meta = parse_json(str(raw), f"{where}: meta", max_bytes=_MAX_META_BYTES)
    if not isinstance(meta, dict):
        raise InputError(f"{where}: meta must be a JSON object, got {type(meta).__name__}")
    for key in ("world_size", "lower_bound", "format_version"):
        v = meta.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise InputError(f"{where}: meta {key} must be a non-negative integer, got {v!r}")
    model = meta.get("cost_model")
    if model is not None:
        ok = isinstance(model, dict) and model.get("source") in ("n_bytes", "linear")
        if ok and model["source"] == "linear":
            ok = all(
                isinstance(model.get(k), (int, float)) and not isinstance(model.get(k), bool)
                for k in ("per_node", "per_edge")
            )
        if not ok:
            raise InputError(
                f"{where}: meta cost_model must be {{'source': 'n_bytes'}} or "
                f"{{'source': 'linear', 'per_node': a, 'per_edge': b}}, got {model!r}"
            )
    return meta


def _int_array(a: np.ndarray, key: str, where: str) -> np.ndarray:
    """A plan-file array as 1-D int64; other dtypes, shapes or values past int64 are refused."""
    if a.ndim != 1:
        raise InputError(f"{where}: {key} must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise InputError(f"{where}: {key} must hold integers, got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise InputError(f"{where}: {key} holds {int(a.max())}, past the int64 range")
    return a.astype(np.int64, copy=False)
