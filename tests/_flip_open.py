"""Run by tests/datasets/test_store_integrity.py in a fresh interpreter: flip single bytes of a
store file at the given positions, one at a time, and in a forked child (time limit ``LIMIT`` s)
open the copy, read every graph through ``read_batch`` (chunk checks on) and compare with the
intact store. Prints one JSON line counting ``same`` (opened, every read equal), ``refused``
(StoreFormatError or InputError with a one-line message naming the file), ``wrong`` (a read
returned other data), ``bad_error`` (another exception, or a message that is not one line or
does not name the file) and ``hang``, with examples.

    python tests/_flip_open.py STORE.h5 POSITIONS.npy LIMIT
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _batches(store) -> list:
    n = len(store)
    out = []
    for a in range(0, n, 7):
        idx = np.arange(a, min(n, a + 7))
        shape = (int(store.n_node[idx].sum()) + 1, int(store.n_edge[idx].sum()), idx.shape[0] + 1)
        b = store.read_batch(idx, shape, layout="jraph")
        out.append({k: np.array(v) for k, v in b.fields.items()})
    return out


def main(store_path: str, positions_path: str, limit: float) -> None:
    import warnings

    from graphbatch import InputError
    from graphbatch.datasets import GraphStore

    warnings.simplefilter("ignore")
    raw = Path(store_path).read_bytes()
    with GraphStore(store_path) as s:
        ref = (s.name, s.meta, s.fields, _batches(s), np.array(s.failed_index))
    positions = np.load(positions_path).tolist()
    masks = (0x01, 0x80, 0xFF, 0x10)
    bad = Path(tempfile.mkdtemp()) / "flipped.h5"
    counts = {"same": 0, "refused": 0, "wrong": 0, "bad_error": 0, "hang": 0}
    examples: dict[str, list] = {k: [] for k in counts}
    for k, pos in enumerate(positions):
        mask = masks[k % len(masks)]
        flipped = bytearray(raw)
        flipped[pos] ^= mask
        bad.write_bytes(bytes(flipped))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code, note = 4, ""
            try:
                with GraphStore(bad) as s:
                    got = (s.name, s.meta, s.fields, _batches(s), np.array(s.failed_index))
                same = (
                    got[:3] == ref[:3]
                    and np.array_equal(got[4], ref[4])
                    and all(
                        a.keys() == b.keys() and all(np.array_equal(a[f], b[f]) for f in a)
                        for a, b in zip(got[3], ref[3], strict=True)
                    )
                )
                code = 0 if same else 5
            except InputError as exc:  # StoreFormatError is one
                msg = str(exc)
                code, note = (3, "") if ("\n" not in msg and str(bad) in msg) else (4, msg)
            except BaseException as exc:
                note = f"{type(exc).__name__}: {exc}"
            os.write(w, note[:300].encode())
            os._exit(code)
        os.close(w)
        t0 = time.time()
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.time() - t0 > limit:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                code = "hang"
                break
            time.sleep(0.001)
        note = os.read(r, 400).decode(errors="replace")
        os.close(r)
        key = {0: "same", 3: "refused", 5: "wrong", "hang": "hang"}.get(code, "bad_error")
        counts[key] += 1
        if len(examples[key]) < 5:
            examples[key].append([pos, mask, note])
    print(json.dumps({"flips": len(positions), **counts, "examples": examples}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
