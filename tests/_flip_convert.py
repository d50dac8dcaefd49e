"""Run by tests/datasets/test_store_integrity.py in a fresh interpreter: flip bytes of a format-1
store's HDF5 chunk index (its v1 B-tree nodes) one at a time and convert each flipped copy in
a forked child with a time limit. Prints one JSON line: counts of ``refused`` (StoreFormatError),
``exact`` (converted, equal to the intact store), ``wrong`` (converted, different: silent
damage), ``other`` (another exception) and ``hang``, plus examples.

    python tests/_flip_convert.py STORE.h5 REFERENCE.npz STEP
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _tree_spans(raw: bytes) -> list[tuple[int, int]]:
    """``(start, length)`` of the used part of every v1 B-tree node of raw-data chunks
    (signature ``TREE``, node type 1): header, keys and child pointers."""
    spans, pos = [], raw.find(b"TREE")
    while pos >= 0:
        if raw[pos + 4] == 1:
            n = struct.unpack_from("<H", raw, pos + 6)[0]
            for ks in (24, 32, 40):  # key size = 8 + 8 * (rank + 1)
                keys = [pos + 24 + i * (ks + 8) for i in range(n + 1)]
                if keys[-1] + ks > len(raw):
                    continue
                ok = all(
                    struct.unpack_from("<I", raw, k)[0] > 0
                    and struct.unpack_from("<I", raw, k + 4)[0] == 0
                    and struct.unpack_from("<Q", raw, k + ks - 8)[0] == 0
                    for k in keys[:-1]
                )
                if ok:
                    spans.append((pos, 24 + n * (ks + 8) + ks))
                    break
        pos = raw.find(b"TREE", pos + 4)
    return spans


def main(store: str, reference: str, step: int) -> None:
    try:  # the new code reads format-1 metadata in a child process: here, in process
        import graphbatch.datasets._h5probe as probe
        from graphbatch.datasets._convert import check_v1

        probe.probe_v1 = check_v1
    except ImportError:
        pass
    from graphbatch.datasets import GraphStore, StoreFormatError, convert_store

    raw = Path(store).read_bytes()
    ref = dict(np.load(reference))
    spans = _tree_spans(raw)
    positions = [p for a, n in spans for p in range(a, a + n)][::step]
    masks = (0x01, 0x80, 0xFF, 0x10)
    tmp = Path(tempfile.mkdtemp())
    bad, out = tmp / "flipped.h5", tmp / "out.h5"
    counts = {"refused": 0, "exact": 0, "wrong": 0, "other": 0, "hang": 0}
    examples: dict[str, list] = {k: [] for k in counts}
    for k, pos in enumerate(positions):
        mask = masks[k % len(masks)]
        flipped = bytearray(raw)
        flipped[pos] ^= mask
        bad.write_bytes(bytes(flipped))
        out.unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:
            code = 4
            try:
                convert_store(bad, out)
                with GraphStore(out, verify=True) as s:
                    got = {
                        "n_node": s.n_node,
                        "n_edge": s.n_edge,
                        "edge_index": s.packed().edge_index,
                    }
                    for level in ("node", "edge", "graph"):
                        got.update(
                            {f"{level}/{n}": v for n, v in getattr(s.packed(), level).items()}
                        )
                    same = all(np.array_equal(np.asarray(got[n]), v) for n, v in ref.items())
                code = 0 if same else 5
            except StoreFormatError:
                code = 3
            except BaseException:
                code = 4
            os._exit(code)
        t0 = time.time()
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.time() - t0 > 20:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                code = "hang"
                break
            time.sleep(0.002)
        key = {0: "exact", 3: "refused", 5: "wrong", "hang": "hang"}.get(code, "other")
        counts[key] += 1
        if len(examples[key]) < 5:
            examples[key].append([pos, mask])
    print(
        json.dumps(
            {"positions": len(positions), "nodes": len(spans), **counts, "examples": examples}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
