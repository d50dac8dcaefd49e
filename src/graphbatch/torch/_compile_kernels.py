"""The compiled C++ kernels a run's saved artifacts carry beside torch's own bytes.

``torch.compiler.save_cache_artifacts`` carries FX graphs, AOTAutograd entries and (on a GPU)
Triton kernels, but not the C++ kernels Inductor compiles for the CPU, nor the CPU-feature
probes it compiles before the first of them: a fresh cache folder compiles all of them again,
most of a CPU compile. `kernel_bundle` zips the kernels this process loaded (torch's in-memory
kernel caches name them) and the probes (found by their sources) from Inductor's cache
folder; `unpack_kernels` writes a bundle's files back into a cache folder by name (names
checked, sizes bounded, existing files kept, each written atomically).
"""

from __future__ import annotations

import io
import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .._errors import InputError
from .._io import atomic_write

__all__ = ["MAX_ARTIFACT_BYTES", "kernel_bundle", "unpack_kernels"]

#: Largest artifact file read (torch's bytes or the kernel bundle, unpacked).
MAX_ARTIFACT_BYTES = 1 << 32
#: Kernel files of Inductor's cache folder a bundle may hold: ``xx/<key>[.main].so`` (and
#: the ``.o`` objects a separately compiled kernel links).
_KERNEL_NAME = re.compile(r"^[a-z0-9]{2}/[a-z0-9]{8,80}(\.main)?\.(so|o)$")


def _inductor_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def _loaded_kernel_keys() -> set[str]:
    """Keys of the C++ kernels this process compiled or loaded (torch's in-memory caches)."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None:
        return set()
    base = getattr(codecache, "CppCodeCache", None)
    keys: set[str] = set()
    for obj in vars(codecache).values():
        if isinstance(obj, type) and base is not None and issubclass(obj, base):
            cache = getattr(obj, "cache", None)
            if isinstance(cache, dict):
                keys.update(k for k in cache if isinstance(k, str))
    return keys


def _isa_probe_sources() -> set[bytes]:
    """Sources of the CPU-feature probes Inductor compiles before its first C++ kernel (the
    ``_*code`` strings of its `VecISA` classes)."""
    mod = sys.modules.get("torch._inductor.cpu_vec_isa")
    base = getattr(mod, "VecISA", None)
    if base is None:
        return set()
    codes = set()
    for obj in vars(mod).values():
        if isinstance(obj, type) and issubclass(obj, base):
            for name in dir(obj):
                value = getattr(obj, name, None)
                if name.endswith("_code") and isinstance(value, str):
                    codes.add(value.encode("utf-8"))
    return codes


def _isa_probe_kernels(root: Path) -> list[Path]:
    """The compiled CPU-feature probes in ``root``: without them a fresh cache folder
    compiles each again (seconds apiece) before the first kernel loads."""
    codes = _isa_probe_sources()
    lengths = {len(c) for c in codes}
    out: list[Path] = []
    for src in root.glob("??/*.cpp"):
        try:
            if src.stat().st_size in lengths and src.read_bytes() in codes:
                out.extend(src.parent.glob(src.stem + "*.so"))
        except OSError:
            continue
    return out


def _kernel_files() -> list[tuple[str, Path]]:
    """``(name in the bundle, file)`` of the compiled C++ kernels to carry."""
    root = _inductor_dir()
    files = [
        p
        for key in _loaded_kernel_keys()
        for pattern in (f"{key[1:3]}/{key}*.so", f"{key[1:3]}/{key}*.o")
        for p in root.glob(pattern)
    ]
    files += _isa_probe_kernels(root)
    out = {}
    for p in files:
        name = f"{p.parent.name}/{p.name}"
        if _KERNEL_NAME.match(name) and p.is_file():
            out[name] = p
    return sorted(out.items())


def kernel_bundle() -> bytes | None:
    files = _kernel_files()
    if not files:
        return None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, path in files:
            zf.write(path, name)
    return buf.getvalue()


def _writer(data: bytes) -> Callable[[IO[bytes]], object]:
    return lambda fh: fh.write(data)


def unpack_kernels(data: bytes, where: str) -> int:
    """Write the bundle's kernels into Inductor's cache folder (names checked, existing files
    kept); returns how many were written."""
    root = _inductor_dir()
    written = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if sum(i.file_size for i in infos) > MAX_ARTIFACT_BYTES:
                raise InputError(f"{where}: kernels over the limit of {MAX_ARTIFACT_BYTES:,} bytes")
            for info in infos:
                if not _KERNEL_NAME.match(info.filename):
                    raise InputError(f"{where}: unexpected member {info.filename!r}")
                target = root / info.filename
                if target.exists():
                    continue
                with zf.open(info) as fh:
                    blob = fh.read(info.file_size + 1)
                if len(blob) != info.file_size:
                    raise InputError(f"{where}: member {info.filename!r} has the wrong size")
                atomic_write(target, _writer(blob))
                written += 1
    except zipfile.BadZipFile as exc:
        raise InputError(f"{where}: not a kernel bundle ({exc})") from None
    return written
