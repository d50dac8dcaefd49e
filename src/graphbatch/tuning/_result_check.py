"""The structure of a tune result file, checked before `TuneResult.from_dict` reads it: every
key that the result, its ranking table and ``graphbatch report --tune`` use, with its type, so
a hand-edited or damaged file is one `InputError` naming the key (``models.eager.time.coef``),
never a ``KeyError``/``TypeError`` traceback later. Keys the readers do not use are not
checked (a newer writer may add some)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._errors import InputError

__all__ = ["check_result_dict"]

#: The size features a fitted cost may use (``_model._COLUMN``).
_FEATURES = ("n_node", "n_edge", "n_graph")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(key: str, want: str, value: Any) -> InputError:
    return InputError(f"key {key}: expected {want}, got {_show(value)}")


def _number(key: str, value: Any, *, minimum: float | None = None, finite: bool = True) -> None:
    """A JSON number (not a boolean), finite unless ``finite=False``, >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, "a number", value)
    if finite and not math.isfinite(value):
        raise _bad(key, "a finite number", value)
    if minimum is not None and not value >= minimum:
        raise _bad(key, f"a number >= {minimum:g}", value)


def _type(key: str, value: Any, kind: type, name: str) -> None:
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise _bad(key, name, value)


def _get(d: dict, key: str, path: str, optional: bool = False) -> Any:
    if key not in d:
        if optional:
            return None
        raise InputError(f"key {path}{key} is missing")
    return d[key]


def _numbers(key: str, value: Any, *, finite: bool = True, length: int | None = None) -> None:
    if not isinstance(value, list):
        raise _bad(key, "a list of numbers", value)
    if length is not None and len(value) != length:
        raise _bad(key, f"a list of {length} numbers", value)
    for i, v in enumerate(value):
        _number(f"{key}[{i}]", v, finite=finite)


def _object(key: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise _bad(key, "an object", value)
    return value


def _fields(d: dict, path: str, spec: dict[str, tuple[Callable[[str, Any], None], bool]]) -> None:
    """Check ``d``'s keys by ``spec``: key -> (check(key path, value), optional)."""
    for key, (check, optional) in spec.items():
        value = _get(d, key, path, optional)
        if value is not None or not optional:
            check(path + key, value)


def _str(key: str, value: Any) -> None:
    _type(key, value, str, "a string")


def _bool(key: str, value: Any) -> None:
    _type(key, value, bool, "true or false")


def _count(key: str, value: Any) -> None:
    _number(key, value, minimum=0)


def _request(key: str, value: Any) -> None:
    d = _object(key, value)
    _str(f"{key}.strategy", _get(d, "strategy", f"{key}."))


def _prediction(key: str, value: Any) -> None:
    d = _object(key, value)
    counts = ("index", "epochs", "steps", "real_graphs", "epoch_ps", "compile_ms", "shapes")
    spec: dict[str, tuple[Callable[[str, Any], None], bool]] = {
        "label": (_str, False),
        "request": (_request, False),
        "mode": (_str, False),
        **{k: (_count, False) for k in (*counts, "recompiles")},
        "world_size": (lambda k, v: _number(k, v, minimum=1), False),
        "peak_bytes": (_count, True),
        "node_efficiency": (_number, False),
        "edge_efficiency": (_number, False),
        "graphs_per_batch": (_number, False),
        "feasible": (_bool, False),
        "reason": (_str, False),
        "plan_digest": (_str, True),
    }
    _fields(d, f"{key}.", spec)


def _linear(key: str, value: Any) -> None:
    d = _object(key, value)
    features = _get(d, "features", f"{key}.")
    if not isinstance(features, list) or not all(f in _FEATURES for f in features):
        raise _bad(f"{key}.features", f"a list of {', '.join(_FEATURES)}", features)
    _number(f"{key}.intercept", _get(d, "intercept", f"{key}."))
    _numbers(f"{key}.coef", _get(d, "coef", f"{key}."), length=len(features))
    units = _get(d, "units", f"{key}.")
    _number(f"{key}.units", units)
    if not units > 0:
        raise _bad(f"{key}.units", "a number > 0", units)
    for errors in ("loo_rel_errors", "fit_rel_errors"):
        if errors in d:
            _numbers(f"{key}.{errors}", d[errors], finite=False)


def _compile(key: str, value: Any) -> None:
    d = _object(key, value)
    _fields(
        d,
        f"{key}.",
        {
            "first_ms": (_count, False),
            "per_shape_ms": (_count, False),
            "samples_ms": (_numbers, True),
        },
    )


def _probe(key: str, value: Any) -> None:
    d = _object(key, value)
    shape = _get(d, "shape", f"{key}.")
    _numbers(f"{key}.shape", shape, length=3)
    _fields(
        d,
        f"{key}.",
        {
            "mode": (_str, False),
            "step_ms": (_numbers, False),
            "first_ms": (_number, False),
            "peak_bytes": (_count, True),
            "source": (_str, True),
            "phase": (_str, True),
        },
    )


def _model(key: str, value: Any) -> None:
    d = _object(key, value)
    _fields(
        d,
        f"{key}.",
        {
            "mode": (_str, False),
            "time": (_linear, False),
            "compile": (_compile, False),
            "memory": (_linear, True),
            "memory_margin": (_count, True),
        },
    )
    probes = d.get("probes", [])
    if not isinstance(probes, list):
        raise _bad(f"{key}.probes", "a list of probes", probes)
    for i, p in enumerate(probes):
        _probe(f"{key}.probes[{i}]", p)


def _list_of_objects(key: str, value: Any) -> None:
    if not isinstance(value, list):
        raise _bad(key, "a list", value)
    for i, v in enumerate(value):
        _object(f"{key}[{i}]", v)


def check_result_dict(d: Any, format_name: str) -> dict:
    """``d`` if it is a tune result of format ``format_name`` whose every key used by
    `TuneResult` and the report has its type; else `InputError` naming the first bad key."""
    if not isinstance(d, dict):
        raise InputError(f"a tune result is a JSON object, got {type(d).__name__}")
    if d.get("format") != format_name:
        raise InputError(
            f"not a tune result (format {_show(d.get('format'))}, expected {format_name!r})"
        )
    _request("request", _get(d, "request", ""))
    _str("mode", _get(d, "mode", ""))
    _number("world_size", _get(d, "world_size", ""), minimum=1)
    ranking = _get(d, "ranking", "")
    if not isinstance(ranking, list) or not ranking:
        raise _bad("ranking", "a non-empty list of predictions", ranking)
    for i, p in enumerate(ranking):
        _prediction(f"ranking[{i}]", p)
    models = _object("models", _get(d, "models", ""))
    if not models:
        raise _bad("models", "at least one fitted model", models)
    for mode, m in models.items():
        _model(f"models.{mode}", m)
    for key in ("validation", "failed"):
        if key in d:
            _list_of_objects(key, d[key])
    settings = _object("settings", d.get("settings", {}))
    if "batch_tolerance" in settings:
        _number("settings.batch_tolerance", settings["batch_tolerance"])
    return d
