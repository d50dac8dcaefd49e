"""Compilation paid once: a persistent home for torch's compile caches, and a run's compiled
artifacts saved beside its plan or checkpoint for the next run -- on another node -- to load.

Two layers (docs/compile-cache.md):

* `compile_cache` points torch's on-disk caches (Inductor's FX graph and AOTAutograd caches,
  the compiled kernels, Triton's cache) at one folder that outlives the job: an argument, else
  ``$GRAPHBATCH_COMPILE_CACHE``, else ``~/.cache/graphbatch/torch-compile`` (not ``/tmp``,
  which a cluster node empties). A second run on the same machine or shared file system then
  finds its compilations there.
* `save_compile_artifacts` / `load_compile_artifacts` carry one run's compilations to a fresh
  node with an empty cache: torch's own cache-artifact bytes
  (``torch.compiler.save_cache_artifacts``) plus, for CPU kernels (which that format does not
  carry), the compiled C++ kernels, written atomically beside a JSON record of the
  `CompileKey` -- model class, parameter names/shapes/dtypes, the plan's padded shapes, compile
  options, torch and Python versions, device kind. A run loads only artifacts saved under its
  own key; for any other key it warns (one line naming the fields that differ) and compiles
  from scratch, or raises `InputError` with ``strict=True``.

Nothing here unpickles: the artifact bytes go to torch unread, the kernels are plain files
unpacked by name, the record is JSON. Torch runs the code it loads (as it does from its own
cache): load artifacts only from runs you trust.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._io import atomic_write, atomic_write_text, parse_json, read_bounded
from .._version import __version__
from ._compile_kernels import MAX_ARTIFACT_BYTES, kernel_bundle, unpack_kernels

__all__ = [
    "COMPILE_CACHE_ENV",
    "CompileCache",
    "CompileKey",
    "compile_cache",
    "compile_key",
    "default_compile_cache",
    "load_compile_artifacts",
    "save_compile_artifacts",
]

#: Environment variable naming the persistent compile-cache folder (`compile_cache`).
COMPILE_CACHE_ENV = "GRAPHBATCH_COMPILE_CACHE"
KEY_FORMAT = "graphbatch-compile-key/1"
RECORD_FORMAT = "graphbatch-compile-artifacts/1"
_MAX_RECORD_BYTES = 1 << 24
_CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


# --------------------------------------------------------------------------- the cache folder
def default_compile_cache() -> Path:
    """``$GRAPHBATCH_COMPILE_CACHE`` if set, else ``$XDG_CACHE_HOME/graphbatch/torch-compile``
    (``~/.cache/graphbatch/torch-compile`` without ``XDG_CACHE_HOME``)."""
    env = os.environ.get(COMPILE_CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphbatch" / "torch-compile"


def _under_tmp(path: Path) -> bool:
    tmp = Path(tempfile.gettempdir()).resolve()
    return path == tmp or tmp in path.parents


@dataclass
class CompileCache:
    """Where `compile_cache` pointed torch's caches: ``path`` (the folder),
    ``inductor_dir`` (``TORCHINDUCTOR_CACHE_DIR``: FX graph, AOTAutograd and kernel caches),
    ``triton_dir`` (``TRITON_CACHE_DIR``). As a context manager, leaving the block restores
    the previous settings."""

    path: Path
    inductor_dir: Path
    triton_dir: Path
    _saved: dict[str, Any] = field(default_factory=dict, repr=False)

    def __enter__(self) -> CompileCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back the environment variables and torch settings found before."""
        for var in _CACHE_VARS:
            old = self._saved.get(var)
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old
        if "flags" in self._saved:
            _set_cache_flags(self._saved["flags"])
        _clear_path_caches()


def _cache_flags() -> tuple[bool, bool]:
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    return bool(iconfig.fx_graph_cache), bool(fconfig.enable_autograd_cache)


def _set_cache_flags(flags: tuple[bool, bool]) -> None:
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    iconfig.fx_graph_cache, fconfig.enable_autograd_cache = flags


def _clear_path_caches() -> None:
    """Forget cache paths torch memoised in this process (only if Inductor is loaded)."""
    import sys

    utils = sys.modules.get("torch._inductor.utils")
    if utils is not None:
        utils.clear_caches()


def compile_cache(path: str | os.PathLike | None = None) -> CompileCache:
    """Point torch's on-disk compile caches at ``path`` for this process and the processes it
    starts afterwards: ``TORCHINDUCTOR_CACHE_DIR = path/inductor`` (FX graph cache,
    AOTAutograd cache, compiled kernels), ``TRITON_CACHE_DIR = path/triton``, and the FX graph
    and AOTAutograd caches switched on. ``path`` defaults to `default_compile_cache`
    (``$GRAPHBATCH_COMPILE_CACHE``). Call it before the first ``torch.compile`` call runs.

    A folder under the temporary directory gets a warning: cluster nodes empty it between
    jobs. Returns a `CompileCache`; ``with compile_cache(p): ...`` restores the previous
    settings on exit."""
    folder = Path(path).expanduser() if path is not None else default_compile_cache()
    folder = folder.resolve()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"compile cache {str(folder)!r} exists and is not a folder")
    if _under_tmp(folder):
        warnings.warn(
            f"compile cache {str(folder)!r} is under the temporary directory, which cluster "
            "nodes empty between jobs; give a folder that persists (see docs/compile-cache.md)",
            stacklevel=2,
        )
    cache = CompileCache(folder, folder / "inductor", folder / "triton")
    cache._saved = {var: os.environ.get(var) for var in _CACHE_VARS}
    cache._saved["flags"] = _cache_flags()
    cache.inductor_dir.mkdir(parents=True, exist_ok=True)
    cache.triton_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache.inductor_dir)
    os.environ["TRITON_CACHE_DIR"] = str(cache.triton_dir)
    _set_cache_flags((True, True))
    _clear_path_caches()
    return cache


# --------------------------------------------------------------------------- the key
@dataclass(frozen=True)
class CompileKey:
    """What compiled artifacts are for: ``fields`` (JSON values: ``model`` class, ``tensors``
    and ``parameters`` counts, ``tensor_digest`` of the parameter/buffer names, shapes and
    dtypes, ``shapes`` (the sorted distinct padded shapes), ``options``, ``torch``,
    ``python``, ``device``) and ``digest``, the SHA-256 of their canonical JSON."""

    fields: dict[str, Any]
    digest: str

    @property
    def short(self) -> str:
        """The digest's first 16 hex digits: the artifact files' name."""
        return self.digest[:16]

    def differences(self, other: Mapping[str, Any]) -> list[str]:
        """Names of the fields in which ``other`` (a key's fields) differs from this key."""
        names = sorted(set(self.fields) | set(other))
        return [n for n in names if self.fields.get(n) != other.get(n)]


def _digest(fields: Mapping[str, Any]) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _shape_rows(shapes: Any) -> list[list[int]]:
    """Sorted distinct ``[n_node, n_edge, n_graph]`` rows of a plan or an array of shapes."""
    if hasattr(shapes, "pad_nodes") and callable(getattr(shapes, "shapes", None)):
        shapes = shapes.shapes()  # a BatchPlan: its distinct padded shapes
    try:
        arr = np.asarray(shapes)
    except (TypeError, ValueError):
        raise InputTypeError(
            f"shapes must be a BatchPlan or (n_node, n_edge, n_graph) rows, got "
            f"{type(shapes).__name__}"
        ) from None
    if arr.ndim == 1 and arr.shape[0] == 3:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.shape[0] == 0:
        raise InputError(f"shapes must be rows (n_node, n_edge, n_graph), got shape {arr.shape}")
    if arr.dtype.kind not in "iu" or (arr < 0).any():
        raise InputError("shapes must be non-negative integers (n_node, n_edge, n_graph)")
    return [[int(x) for x in row] for row in np.unique(arr.astype(np.int64), axis=0)]


def _device_kind(device: Any) -> str:
    """``cpu:<machine>:<ATen CPU capability>`` or ``cuda:<device name>:sm_<major><minor>``."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda:{torch.cuda.get_device_name(index)}:sm_{major}{minor}"
    if dev.type == "cpu":
        return f"cpu:{platform.machine()}:{torch.backends.cpu.get_cpu_capability()}"
    return dev.type


def _options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InputTypeError(f"options must be a mapping, got {type(options).__name__}")
    try:
        return json.loads(json.dumps(dict(options), sort_keys=True))
    except (TypeError, ValueError):
        raise InputTypeError(
            "options must hold JSON values (str, int, float, bool, None, lists, dicts)"
        ) from None


def compile_key(
    model: Any,
    shapes: Any,
    *,
    device: Any = None,
    options: Mapping[str, Any] | None = None,
) -> CompileKey:
    """The `CompileKey` of ``model`` (a ``torch.nn.Module``; a ``torch.compile`` wrapper is
    unwrapped) compiled for ``shapes`` (a `graphbatch.BatchPlan` -- its distinct padded
    shapes -- or ``(n_node, n_edge, n_graph)`` rows) on ``device`` (default: the device of the
    model's first parameter, else CPU), with ``options`` (JSON values, e.g. ``{"mode":
    "reduce-overhead", "fullgraph": True}``: what else selects the compiled code).

    Parameter values are not in the key (compiled code does not depend on them)."""
    import torch

    model = getattr(model, "_orig_mod", model)
    if not isinstance(model, torch.nn.Module):
        raise InputTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = list(itertools.chain(model.named_parameters(), model.named_buffers()))
    tensors = [[name, list(t.shape), str(t.dtype)] for name, t in named]
    if device is None:
        device = named[0][1].device if named else "cpu"
    fields = {
        "format": KEY_FORMAT,
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "tensors": len(tensors),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "tensor_digest": _digest({"tensors": tensors}),
        "shapes": _shape_rows(shapes),
        "options": _options(options),
        "torch": str(torch.__version__),
        "python": ".".join(platform.python_version_tuple()[:2]),
        "device": _device_kind(device),
    }
    return CompileKey(fields, _digest(fields))


# --------------------------------------------------------------------------- save / load
def _paths(folder: Path, key: CompileKey) -> tuple[Path, Path, Path]:
    stem = f"compile-{key.short}"
    return folder / f"{stem}.json", folder / f"{stem}.torch", folder / f"{stem}.kernels.zip"


def _entry(path: Path, data: bytes) -> dict[str, Any]:
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def save_compile_artifacts(folder: str | os.PathLike, key: CompileKey) -> Path | None:
    """Save what this process has compiled (``torch.compiler.save_cache_artifacts``: every
    compilation since the process started, plus the compiled C++ kernels it loaded) into
    ``folder`` under ``key``: ``compile-<key>.torch``, ``compile-<key>.kernels.zip`` and, last,
    the record ``compile-<key>.json``, each written atomically (a reader sees complete files,
    and refuses a mix of two saves by their digests). Returns the record's path, or ``None``
    (with a warning) when torch has nothing to save (no compilation ran with its caches on).
    Call it on one rank only."""
    import torch

    if not isinstance(key, CompileKey):
        raise InputTypeError(f"key must be a CompileKey, got {type(key).__name__}")
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        warnings.warn(
            "save_compile_artifacts: torch recorded no compilation in this process (nothing "
            "compiled yet, or its caches are off); nothing saved",
            stacklevel=2,
        )
        return None
    blob, info = saved
    record_path, blob_path, kernels_path = _paths(Path(folder), key)
    files = {"torch": _entry(blob_path, blob)}
    atomic_write(blob_path, lambda fh: fh.write(blob))
    kernels = kernel_bundle()
    if kernels is not None:
        files["kernels"] = _entry(kernels_path, kernels)
        atomic_write(kernels_path, lambda fh: fh.write(kernels))
    record = {
        "format": RECORD_FORMAT,
        "digest": key.digest,
        "key": key.fields,
        "files": files,
        "torch_artifacts": {k: len(v) for k, v in getattr(info, "artifacts", {}).items()},
        "graphbatch": __version__,
    }
    return atomic_write_text(record_path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def _read_record(path: Path) -> dict[str, Any]:
    raw = read_bounded(path, "compile artifact record", _MAX_RECORD_BYTES)
    rec = parse_json(raw, f"compile artifact record {str(path)!r}", max_bytes=_MAX_RECORD_BYTES)
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        raise InputError(f"{path}: not a compile artifact record ({RECORD_FORMAT})")
    return rec


def _mismatch(folder: Path, key: CompileKey) -> str | None:
    """Why ``folder`` holds no artifacts for ``key`` when it holds some for other keys (the
    nearest key's differing fields), or ``None`` when it holds none."""
    best: list[str] | None = None
    for path in sorted(folder.glob("compile-*.json")):
        try:
            other = _read_record(path).get("key", {})
        except (InputError, OSError):
            continue
        diff = key.differences(other if isinstance(other, dict) else {})
        if best is None or len(diff) < len(best):
            best = diff
    if best is None:
        return None
    return (
        f"compile artifacts in {str(folder)!r} are for another key (the nearest differs in "
        f"{', '.join(best) or 'its digest'})"
    )


def _read_checked(folder: Path, entry: Any, where: str) -> bytes:
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise InputError(f"{where}: malformed file entry")
    name = entry["file"]
    if Path(name).name != name:
        raise InputError(f"{where}: file name {name!r} is not a plain name")
    data = read_bounded(folder / name, "compile artifacts", MAX_ARTIFACT_BYTES)
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise InputError(f"{where}: {name} does not match its recorded SHA-256 (damaged)")
    return data


def _refuse(message: str, strict: bool) -> bool:
    if strict:
        raise InputError(message)
    warnings.warn(f"{message}; compiling from scratch", stacklevel=3)
    return False


def load_compile_artifacts(
    folder: str | os.PathLike, key: CompileKey, *, strict: bool = False
) -> bool:
    """Load the artifacts `save_compile_artifacts` wrote into ``folder`` under ``key`` into
    torch's caches (call before the first compiled step; with `compile_cache` first, into its
    folder). Returns ``True`` when loaded.

    No artifacts at all in ``folder`` (a first run): ``False``, silently. Artifacts for
    another key, or damaged ones: a one-line warning naming what differs and ``False`` (the
    run compiles from scratch); with ``strict=True`` an `InputError` instead."""
    import torch

    if not isinstance(key, CompileKey):
        raise InputTypeError(f"key must be a CompileKey, got {type(key).__name__}")
    folder = Path(folder)
    record_path = _paths(folder, key)[0]
    if not record_path.is_file():
        why = _mismatch(folder, key) if folder.is_dir() else None
        return False if why is None else _refuse(why, strict)
    where = f"compile artifacts {str(record_path)!r}"
    try:
        rec = _read_record(record_path)
        if rec.get("digest") != key.digest or rec.get("key") != key.fields:
            got = rec.get("key")
            diff = key.differences(got if isinstance(got, dict) else {})
            raise InputError(f"{where} are for another key (differs in {', '.join(diff)})")
        files = rec.get("files")
        if not isinstance(files, dict) or "torch" not in files:
            raise InputError(f"{where}: no torch artifact listed")
        blob = _read_checked(folder, files["torch"], where)
        kernels = _read_checked(folder, files["kernels"], where) if "kernels" in files else None
    except (InputError, FileNotFoundError) as exc:
        return _refuse(str(exc), strict)
    if kernels is not None:
        unpack_kernels(kernels, where)
    torch.compiler.load_cache_artifacts(blob)
    return True
