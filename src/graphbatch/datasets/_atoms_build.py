"""Build a graph store from extxyz files or ASE databases (`build_atoms_store`).

Streamed: an extxyz file is scanned once for frame boundaries (atom-count lines) and cut into
blocks of ``chunk_frames`` frames; an ASE database into blocks of rows (``select(offset=,
limit=)``). Each block is parsed by ASE and converted (`graphbatch.datasets._atoms_convert`) in this
process or in one of ``workers`` processes, at most ``2 * workers`` blocks ahead, and appended
to the store in input order by one `GraphStoreWriter` -- never the whole file in memory, the
same store for any ``workers``. The first bad frame stops the build with one line naming the
file, frame and field; nothing is written (the writer discards its temporaries).
"""

from __future__ import annotations

import bisect
import io
import os
import platform
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError
from .._io import check_output_path, check_regular_file
from ._atoms import AtomsInputError, AtomsKeys, store_units
from ._atoms_convert import AtomsChunk, convert_frames, remap_codes
from ._atoms_db import bad_row, exc_text, not_a_database, row_frame
from ._build import BuildReport
from ._extxyz import AtomsFrame, frame_from_atoms, parse_comment, read_frames
from ._neighbours import NEIGHBOUR_LIBRARY, import_vesin
from ._signals import quiet_worker, sigint_held
from ._store_write import GraphStoreWriter

__all__ = ["ATOMS_FORMATS", "build_atoms_store", "extxyz_blocks"]

#: Input formats of `build_atoms_store` (``graphbatch data build extxyz|ase-db``).
ATOMS_FORMATS = ("extxyz", "ase-db")
#: The cutoff (Å) must be above this: vesin refuses cutoffs of 1e-6 and below.
MIN_CUTOFF = 1e-6


@dataclass(frozen=True)
class _Block:
    """Frames ``first .. first + count - 1`` of input ``source``: bytes ``start:stop`` of an
    extxyz file (frame ``k`` starting at line ``lines[k]``), or rows ``start:stop`` of an ASE
    database."""

    fmt: str
    path: str
    source: int
    start: int
    stop: int
    first: int
    lines: tuple = ()


def extxyz_blocks(path: str, source: int, chunk_frames: int) -> Iterator[_Block]:
    """Scan the extxyz file ``path`` for frame boundaries (each frame: an atom-count line, a
    comment line, one line per atom) and yield blocks of ``chunk_frames`` frames. A count line
    that is not a non-negative integer, or a file that ends inside a frame, raises
    `AtomsInputError` naming the line."""
    frame = 0
    line_no = 0
    offset = 0
    block_start, block_first, lines = 0, 0, []
    with open(path, "rb") as fh:
        while True:
            head = fh.readline()
            if not head:
                break
            line_no += 1
            if not head.strip():  # ASE stops at a blank line
                rest = fh.read(1 << 16)
                if rest.strip():
                    raise AtomsInputError(
                        f"{path}: line {line_no}: a blank line inside the "
                        f"file after frame {frame - 1} (extxyz frames follow "
                        "each other directly)"
                    )
                break
            try:
                n = int(head)
            except ValueError:
                raise AtomsInputError(
                    f"{path}: frame {frame} (line {line_no}): atom count: "
                    "expected an integer, got "
                    f"{head[:60].decode(errors='replace').strip()!r}"
                ) from None
            if n < 0:
                raise AtomsInputError(
                    f"{path}: frame {frame} (line {line_no}): atom count: {n} < 0"
                )
            lines.append(line_no)
            for _ in range(n + 1):
                if not fh.readline():
                    raise AtomsInputError(
                        f"{path}: frame {frame} (line {line_no}): the file "
                        f"ends inside the frame ({n} atoms announced)"
                    )
            line_no += n + 1
            frame += 1
            offset_next = fh.tell()
            if len(lines) == chunk_frames:
                yield _Block(
                    "extxyz", path, source, block_start, offset_next, block_first, tuple(lines)
                )
                block_start, block_first, lines = offset_next, frame, []
            offset = offset_next
    if lines:
        yield _Block("extxyz", path, source, block_start, offset, block_first, tuple(lines))


def _db_blocks(path: str, source: int, chunk_frames: int) -> Iterator[_Block]:
    import ase.db

    try:
        with ase.db.connect(path) as db:
            total = db.count()
    except Exception as exc:  # ASE's and its backends' errors have many types
        raise not_a_database(path, exc) from None
    for a in range(0, total, chunk_frames):
        b = min(total, a + chunk_frames)
        yield _Block("ase-db", path, source, a, b, a)


def _extxyz_frames(block: _Block) -> list[AtomsFrame]:
    """The frames of an extxyz block as `AtomsFrame` records: read by `read_frames` (the
    common case, exactly what ``ase.io`` gives) and, for any frame it leaves, by ``ase.io``
    (whose parse errors become one line naming the file, frame and line)."""
    with open(block.path, "rb") as fh:
        fh.seek(block.start)
        raw = fh.read(block.stop - block.start)
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        line = block.lines[0] + raw.count(b"\n", 0, exc.start)
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise AtomsInputError(
            f"{_where(block, line)}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
            f"{column})"
        ) from None
    if "\r" in text and (cr := _LONE_CR.search(text)) is not None:
        line = block.lines[0] + text.count("\n", 0, cr.start())
        raise AtomsInputError(
            f"{_where(block, line)}: a carriage return (\\r) inside the line; ASE reads it as "
            "a line break, so the frame's lines no longer match its atom count (ASE refuses "
            "the file too): remove it"
        )
    lines = text.split("\n")
    starts = [ln - block.lines[0] for ln in block.lines]
    return [
        _ase_frame(lines, starts[k], block, k) if frame is None else frame
        for k, frame in enumerate(read_frames(lines, starts, block.first))
    ]


#: a carriage return that does not end a line (CR LF line ends are ordinary line ends)
_LONE_CR = re.compile(r"\r(?!\n|\Z)")


def _where(block: _Block, line: int) -> str:
    """``FILE: frame F (line L)`` for line ``line`` (1-based, of the file) in ``block``."""
    k = bisect.bisect_right(block.lines, line) - 1
    return f"{block.path}: frame {block.first + max(k, 0)} (line {line})"


def _ase_frame(lines: list[str], at: int, block: _Block, k: int) -> AtomsFrame:
    """Frame ``k`` of ``block`` (its count line is ``lines[at]``) read by ``ase.io``."""
    import ase.io

    n = int(lines[at])
    chunk = "\n".join(lines[at : at + n + 2]) + "\n"
    try:
        atoms = next(ase.io.iread(io.StringIO(chunk), index=":", format="extxyz"))
    except KeyError as exc:  # ASE's symbol table: an unknown species
        symbol = str(exc.args[0]) if exc.args else "?"
        line, _ = _bad_atom_line(lines, at, block.lines[k], symbol)
        raise AtomsInputError(
            f"{block.path}: frame {block.first + k} (line {line}): species: unknown "
            f"chemical symbol {symbol!r}"
        ) from None
    except Exception as exc:  # ASE's parse errors have many types
        line, field = _bad_atom_line(lines, at, block.lines[k])
        where = f"{field}: " if field else ""
        raise AtomsInputError(
            f"{block.path}: frame {block.first + k} (line {line}): malformed extxyz: {where}"
            f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        ) from None
    return frame_from_atoms(block.first + k, atoms)


def _bad_atom_line(
    lines: list[str], at: int, first: int, symbol: str | None = None
) -> tuple[int, str | None]:
    """Where in the frame whose count line is ``lines[at]`` (line ``first`` of the file) ASE
    could not parse, as far as can be told: ``(line, field)`` of the comment line (field
    ``comment line`` or ``Properties``) when it does not parse, else of the first atom line
    starting with ``symbol`` (an unknown species), with fewer columns than ``Properties``
    announces (the field: the property of the first missing column) or with a value its
    column's type does not parse (the field: that property); else the frame's first line and
    no field."""
    from ase.io.extxyz import parse_properties

    try:
        n = int(lines[at])
        spec = parse_comment(lines[at + 1]).get("Properties", "species:S:1:pos:R:3")
    except Exception:
        return first + 1, "comment line"
    try:
        properties, names, _, convs = parse_properties(spec)
    except Exception:
        return first + 1, "Properties"
    columns = [name for name in names for _ in range(properties[name][1])]
    for r in range(n):
        if at + 2 + r >= len(lines):
            break
        tokens = lines[at + 2 + r].split()
        if symbol is not None:
            if tokens[:1] == [symbol]:
                return first + 2 + r, "species"
            continue
        if len(tokens) < len(columns):
            return first + 2 + r, columns[len(tokens)]
        for name, conv, token in zip(columns, convs, tokens, strict=False):
            try:
                conv(token)
            except (ValueError, TypeError, OverflowError):
                return first + 2 + r, name
    return first, None


def _db_frames(block: _Block) -> Iterator[AtomsFrame]:
    """The rows of an ASE-database block as `AtomsFrame` records; a row ASE cannot read (a
    damaged blob, a JSON row that is no structure) raises `AtomsInputError` naming the file
    and the row: its position in id order, and its id where the database gives it."""
    import ase.db

    position = block.start  # rows of the database in id order before this one
    try:
        with ase.db.connect(block.path) as db:
            rows = db.select(offset=block.start, limit=block.stop - block.start, sort="id")
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    return
                yield row_frame(row)
                position += 1
    except AtomsInputError:
        raise
    except Exception as exc:  # ASE's errors have many types
        raise bad_row(block.path, position, exc) or AtomsInputError(
            f"{block.path}: row number {position + 1} in id order: not a readable structure "
            f"({exc_text(exc)})"
        ) from None


def _convert_block(args: tuple[_Block, float, AtomsKeys]) -> AtomsChunk:
    block, cutoff, keys = args
    frames = _extxyz_frames(block) if block.fmt == "extxyz" else _db_frames(block)
    return convert_frames(frames, cutoff=cutoff, keys=keys, source=block.source, where=block.path)


def _worker_start() -> None:
    """A build worker only converts: vesin without torch (`import_vesin`); SIGINT is left to
    the parent (`quiet_worker`)."""
    quiet_worker()
    import_vesin(without_torch=True)


def _end_workers(pool: Any) -> None:
    """Stop ``pool`` (a ``ProcessPoolExecutor``) now, its running conversions included -- the
    build was stopped (an error, a signal): without waiting for them, and without cancelling
    futures (CPython 3.11's pool then raises ``InvalidStateError`` in its manager thread when
    the workers end)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)
    pool.shutdown(wait=True)


def _converted(
    blocks: Iterator[_Block], cutoff: float, keys: AtomsKeys, workers: int
) -> Iterator[AtomsChunk]:
    """Chunks of ``blocks`` in order, converted here or by ``workers`` processes (spawned: the
    caller may hold torch or threads) at most ``2 * workers`` blocks ahead. Stopped early (an
    error here or in a worker, a signal, the caller closing it), the workers end at once."""
    if workers <= 1:
        for block in blocks:
            yield _convert_block((block, cutoff, keys))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start
    )
    try:
        pending: deque = deque()
        for block in blocks:
            with sigint_held():  # a submit may start a worker process
                pending.append(pool.submit(_convert_block, (block, cutoff, keys)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BaseException:
        _end_workers(pool)
        raise
    pool.shutdown(wait=True)


def _format_of(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".db", ".json", ".aselmdb") or path.endswith(".db"):
        return "ase-db"
    return "extxyz"


def _checked_cutoff(cutoff: Any) -> float:
    """``cutoff`` as a float distance (Å) the neighbour list takes, else `InputError`."""
    try:
        cutoff = float(cutoff)
    except (TypeError, ValueError):
        raise InputError(f"cutoff must be a number, got {cutoff!r}") from None
    if not (np.isfinite(cutoff) and cutoff > 0):
        raise InputError(f"cutoff must be a finite distance > 0 (Å), got {cutoff!r}")
    if cutoff <= MIN_CUTOFF:
        raise InputError(
            f"cutoff {cutoff!r} Å is at or below {MIN_CUTOFF!r} Å, the smallest the neighbour "
            f"list ({NEIGHBOUR_LIBRARY}) takes"
        )
    return cutoff


def _input_formats(paths: list[str], format: str | None) -> list[str]:
    """The format of each input (``format``, else guessed from its name), each checked to be
    one of `ATOMS_FORMATS` and a regular file."""
    formats = [format or _format_of(p) for p in paths]
    for path, fmt in zip(paths, formats, strict=True):
        if fmt not in ATOMS_FORMATS:
            raise InputError(f"unknown format {fmt!r}; choose one of {ATOMS_FORMATS}")
        check_regular_file(path, f"{fmt} input")
    return formats


def _default_keys(formats: list[str]) -> AtomsKeys:
    """MACE's ``REF_*`` keys, or the calculator's names where every input is an ASE database."""
    if set(formats) == {"ase-db"}:
        return AtomsKeys(
            energy="energy", forces="forces", stress="stress", virials="virials", charges="charges"
        )
    return AtomsKeys()


def _store_meta(
    paths: list[str],
    formats: list[str],
    cutoff: float,
    keys: AtomsKeys,
    units: dict[str, str] | None,
) -> dict[str, Any]:
    """The store's meta before its chunks (config types, heads, element and label counts are
    added by `_write_chunks`)."""
    import ase

    vesin = import_vesin()
    return {
        "dataset": "atoms",
        "schema": "graphbatch-atoms-1",
        "sources": paths,
        "formats": formats,
        "cutoff_angstrom": cutoff,
        "keys": keys.as_json(),
        "units": store_units(keys, units),
        "neighbour_list": {
            "library": NEIGHBOUR_LIBRARY,
            "version": vesin.__version__,
            "edges": "MACE's get_neighborhood: |x_j - x_i + S @ cell| < cutoff, "
            "no self-edge at S = 0",
        },
        "reader": f"ase {ase.__version__}",
        "python": platform.python_version(),
    }


def _write_chunks(
    writer: GraphStoreWriter, chunks: Iterator[AtomsChunk], keys: AtomsKeys, bar: Any
) -> tuple[int, int, int]:
    """Append ``chunks`` to ``writer`` in order, their config-type and head codes remapped to
    store-wide tables, and add those tables, the frames with each property and the elements
    seen to the writer's meta. ``bar``: a progress bar (``update(frames)``) or None. Returns
    the totals ``(graphs, nodes, edges)``."""
    config_types: list[str] = []
    heads: list[str] = []
    present = {p: 0 for p in keys.used()}
    n_graph = n_node = n_edge = 0
    seen = np.zeros(256, dtype=bool)
    for chunk in chunks:
        graphs = chunk.graphs
        graphs.graph["config_type"] = remap_codes(
            graphs.graph["config_type"], chunk.config_types, config_types
        )
        graphs.graph["head"] = remap_codes(graphs.graph["head"], chunk.heads, heads)
        writer.append(graphs)
        seen[graphs.node["atomic_numbers"]] = True
        for prop, count in chunk.present.items():
            present[prop] += count
        n_graph += len(graphs)
        n_node += int(graphs.n_node.sum())
        n_edge += int(graphs.n_edge.sum())
        if bar is not None:
            bar.update(len(graphs))
    if len(config_types) > np.iinfo(np.int32).max or len(heads) > np.iinfo(np.int16).max:
        raise InputError("too many distinct config types or heads")
    writer.meta.update(
        config_types=config_types,
        heads=heads,
        frames_with={p: int(c) for p, c in present.items()},
        elements=[int(z) for z in np.flatnonzero(seen)],
    )
    return n_graph, n_node, n_edge


def build_atoms_store(
    sources: str | os.PathLike | Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    cutoff: float,
    format: str | None = None,
    keys: AtomsKeys | None = None,
    workers: int = 1,
    chunk_frames: int = 512,
    units: dict[str, str] | None = None,
    name: str | None = None,
    progress: bool = False,
) -> BuildReport:
    """Read structures from extxyz files or ASE databases ``sources`` and write their radius
    graphs at ``cutoff`` (in the positions' unit, Å) with MACE's edge set, labels and weights
    to a graph store at ``out`` (schema: `graphbatch.datasets._atoms`).

    ``format``: ``"extxyz"`` or ``"ase-db"`` (default: ``.db``/``.json`` files are ASE
    databases, anything else extxyz). ``keys``: where energy, forces, stress, virials and
    charges are read, which are required, ``keep``, config-type weights and head
    (`AtomsKeys`; default MACE's ``REF_*`` keys for extxyz and the calculator's names --
    ``energy``, ``forces``, ``stress`` -- for ASE databases). ``workers`` processes convert
    blocks of ``chunk_frames`` frames. ``units`` overrides the units stated in the store's
    meta (values are stored as read). The store appears at ``out`` only when complete."""
    t0 = time.perf_counter()
    paths = [str(sources)] if isinstance(sources, (str, os.PathLike)) else [str(s) for s in sources]
    if not paths:
        raise InputError("no input files")
    cutoff = _checked_cutoff(cutoff)
    if isinstance(workers, bool) or int(workers) < 1:
        raise InputError(f"workers must be >= 1, got {workers!r}")
    if isinstance(chunk_frames, bool) or int(chunk_frames) < 1:
        raise InputError(f"chunk_frames must be >= 1, got {chunk_frames!r}")
    formats = _input_formats(paths, format)
    check_output_path(out, paths)
    keys = _default_keys(formats) if keys is None else keys
    meta = _store_meta(paths, formats, cutoff, keys, units)

    def blocks() -> Iterator[_Block]:
        for k, (path, fmt) in enumerate(zip(paths, formats, strict=True)):
            make = extxyz_blocks if fmt == "extxyz" else _db_blocks
            yield from make(path, k, int(chunk_frames))

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit="frame", desc="structures -> graphs")
    try:
        with GraphStoreWriter(out, name=name or Path(paths[0]).stem, meta=meta) as writer:
            chunks = _converted(blocks(), cutoff, keys, int(workers))
            n_graph, n_node, n_edge = _write_chunks(writer, chunks, keys, bar)
    finally:
        if bar is not None:
            bar.close()
    return BuildReport(
        path=Path(out),
        dataset="atoms",
        n_graph=n_graph,
        n_node=n_node,
        n_edge=n_edge,
        seconds=time.perf_counter() - t0,
    )
