"""Issue 26, part 5: plan files and size tables are read with every size bounded before it is
allocated or decompressed -- a one-line error naming the file and the limit, never a
RecursionError, a MemoryError or a 400 MB decompression."""

from __future__ import annotations

import io
import json
import tracemalloc
import zipfile

import numpy as np
import pytest

import graphbatch as gb
from graphbatch import InputError


def _plan_arrays() -> dict:
    sizes = gb.GraphSizes([3, 4, 5, 6, 2, 1], [2, 3, 4, 5, 1, 0])
    return gb.plan(sizes, "dynamic", batch_size=3, seed=1).to_arrays()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _zip(path, members: dict[str, bytes], deflate=()) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(
                f"{name}.npy",
                data,
                compress_type=zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED,
            )


def _bounded(load, path, match: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=match) as err:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert peak < 32 << 20, f"{peak:,} bytes allocated"


def test_deeply_nested_meta_is_refused_not_a_recursion_error(tmp_path):
    a = _plan_arrays()
    a["meta"] = np.array("[" * 100_000 + "]" * 100_000)
    np.savez(tmp_path / "p.npz", **a)
    _bounded(
        gb.BatchPlan.load,
        tmp_path / "p.npz",
        r"nested 100000 levels deep, over the "
        r"limit of 64",
    )
    a["meta"] = np.array(json.dumps({"x": "y" * 100}) + " " * (17 << 20))
    np.savez(tmp_path / "q.npz", **a)
    with pytest.raises(InputError, match="over the limit of 16,777,216"):
        gb.BatchPlan.load(tmp_path / "q.npz")


def test_npy_header_claiming_a_huge_shape_is_refused_not_allocated(tmp_path):
    a = _plan_arrays()
    members = {k: _npy(v) for k, v in a.items()}
    header = np.lib.format.header_data_from_array_1_0(a["order"])
    header["shape"] = (2**40,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members["order"] = buf.getvalue() + a["order"].tobytes()
    _zip(tmp_path / "p.npz", members)
    _bounded(
        gb.BatchPlan.load,
        tmp_path / "p.npz",
        r"'order' declares shape \(1099511627776,\).*but the file holds 48 bytes",
    )
    sizes = {"n_node": buf.getvalue() + a["order"].tobytes(), "n_edge": _npy(np.arange(6))}
    _zip(tmp_path / "s.npz", sizes)
    _bounded(gb.GraphSizes.load, tmp_path / "s.npz", "declares shape")


def test_zip_members_are_bounded_before_decompressing(tmp_path):
    """A 400 MB member (deflated to a few hundred KB) was decompressed whole before any size
    check: its length now has to match what the other members say first."""
    a = _plan_arrays()
    members = {k: _npy(v) for k, v in a.items()}
    members["order"] = _npy(np.zeros(50_000_000, dtype=np.int64))  # 400 MB of zeros
    _zip(tmp_path / "p.npz", members, deflate=("order",))
    assert (tmp_path / "p.npz").stat().st_size < 2 << 20
    _bounded(
        gb.BatchPlan.load,
        tmp_path / "p.npz",
        r"'order' has shape \(50000000,\); its first dimension must be 6",
    )
    sizes = {"n_node": _npy(np.arange(5)), "n_edge": _npy(np.zeros(12_500_000, np.int64))}
    _zip(tmp_path / "s.npz", sizes, deflate=("n_edge",))
    _bounded(gb.GraphSizes.load, tmp_path / "s.npz", "its first dimension must be 5")
    # members nobody reads are not read: a junk member does not cost its size
    members = {k: _npy(v) for k, v in a.items()}
    members["junk"] = _npy(np.zeros(12_500_000, dtype=np.int64))
    _zip(tmp_path / "j.npz", members, deflate=("junk",))
    tracemalloc.start()
    try:
        plan = gb.BatchPlan.load(tmp_path / "j.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(plan) == len(a["pad_nodes"]) and peak < 32 << 20


def test_damaged_member_bytes_fail_their_crc(tmp_path):
    a = _plan_arrays()
    np.savez(tmp_path / "p.npz", **a)
    raw = bytearray((tmp_path / "p.npz").read_bytes())
    at = raw.find(a["order"].tobytes())
    raw[at] ^= 0x01
    (tmp_path / "p.npz").write_bytes(bytes(raw))
    with pytest.raises(InputError, match="CRC"):
        gb.BatchPlan.load(tmp_path / "p.npz")
