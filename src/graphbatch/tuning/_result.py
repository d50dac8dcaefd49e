"""`TuneResult`: what `graphbatch.tune` found -- the chosen request, the ranked predictions, the
fitted cost models with their probes, the validation runs -- and its JSON file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import InputError
from .._io import atomic_write_text, json_default, parse_json, read_bounded
from ._model import StepCostModel
from ._result_check import check_result_dict
from ._search import Prediction

__all__ = ["TuneResult", "TUNE_FORMAT", "load_request", "REQUEST_KEYS"]

#: ``format`` field of a tune result file.
TUNE_FORMAT = "graphbatch-tune/1"
#: Keys of a request file besides strategy options (the keyword arguments of ``graphbatch.plan``
#: that `graphbatch.torch.loader` and `graphbatch.jax.loader` share).
REQUEST_KEYS = ("strategy", "batch_size", "budget", "seed", "shuffle", "on_oversize")
#: Largest request or tune result file read (a result with its probes is well under 1 MiB).
MAX_FILE_BYTES = 1 << 26


def _read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in the regular file ``path``, read bounded: a FIFO, a device or a
    directory, a file over `MAX_FILE_BYTES`, nesting too deep, or text that is not JSON raise
    `InputError` naming the file (`graphbatch._io.read_bounded`, `parse_json`)."""
    data = read_bounded(path, what, MAX_FILE_BYTES)
    return parse_json(data, f"{what} {str(path)!r}", max_bytes=MAX_FILE_BYTES)


@dataclass
class TuneResult:
    """The outcome of `graphbatch.tune`.

    ``request``: the chosen configuration as keyword arguments of ``graphbatch.plan(sizes,
    **request)``, ``graphbatch.torch.loader(dataset, **request)`` and
    ``graphbatch.jax.loader(source, **request)`` (with ``world_size``/``num_replicas``/``devices``
    for ``world_size > 1``, which the request leaves to the caller); ``mode``: the step variant
    it was predicted fastest in (``compiled``, ``eager`` or ``jit``); ``ranking``: every
    (candidate, mode) prediction, best first; ``models``: the fitted `StepCostModel` per mode;
    ``validation``: predicted beside measured for the validated configurations;
    ``failed``: candidates the planner refused; ``settings``: the inputs, machine and timings;
    ``break_even``: after how many steps the best compiled configuration overtakes the best
    eager one, compilation counted, beside the steps planned (``None`` without both modes).
    A validation row with ``trusted: False`` is a measurement tune could not trust (its
    ``trust_reasons`` say why), not a valid result.
    """

    request: dict[str, Any]
    mode: str
    world_size: int
    ranking: list[Prediction]
    models: dict[str, StepCostModel]
    validation: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    break_even: dict[str, Any] | None = None

    @property
    def chosen(self) -> Prediction:
        return self.ranking[0]

    @property
    def untrusted(self) -> list[dict[str, Any]]:
        """The validation rows tune could not trust after its retries."""
        return [v for v in self.validation if v.get("trusted") is False]

    def table(self, top: int | None = None) -> list[dict[str, Any]]:
        """The ranked table: one row per (configuration, mode), best first."""
        rows = []
        for i, p in enumerate(self.ranking[:top] if top else self.ranking, start=1):
            rows.append({"rank": i, **p.row()})
        return rows

    def validation_table(self) -> list[dict[str, Any]]:
        """Predicted beside measured, one row per validated configuration."""
        keys = (
            "config",
            "mode",
            "steps",
            "pred_step_ms",
            "meas_step_ms",
            "step_err_pct",
            "pred_graphs_per_s",
            "meas_graphs_per_s",
            "pred_peak_mib",
            "meas_peak_mib",
            "compiles",
            "load_drift",
            "load_adjusted_err_pct",
            "trusted",
            "attempts",
        )
        return [{k: v.get(k) for k in keys} for v in self.validation]

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": TUNE_FORMAT,
            "request": self.request,
            "mode": self.mode,
            "world_size": self.world_size,
            "ranking": [p.as_dict() for p in self.ranking],
            "models": {k: m.as_dict() for k, m in self.models.items()},
            "validation": self.validation,
            "failed": self.failed,
            "settings": self.settings,
            "break_even": self.break_even,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TuneResult:
        """The result of a parsed result file; `InputError` naming the first missing or
        mistyped key (`check_result_dict`)."""
        check_result_dict(d, TUNE_FORMAT)
        return cls(
            request=dict(d["request"]),
            mode=str(d["mode"]),
            world_size=int(d["world_size"]),
            ranking=[Prediction.from_dict(p) for p in d["ranking"]],
            models={k: StepCostModel.from_dict(m) for k, m in d["models"].items()},
            validation=list(d.get("validation", [])),
            failed=list(d.get("failed", [])),
            settings=dict(d.get("settings", {})),
            break_even=None if d.get("break_even") is None else dict(d["break_even"]),
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write the whole result as JSON (atomically)."""
        return atomic_write_text(
            path, json.dumps(self.as_dict(), indent=1, default=json_default) + "\n"
        )

    def save_request(self, path: str | os.PathLike) -> Path:
        """Write only the chosen request (the file ``graphbatch plan --config`` reads)."""
        return atomic_write_text(path, json.dumps(self.request, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> TuneResult:
        d = _read_json(path, "tune result")
        if not isinstance(d, dict):
            raise InputError(f"{path}: a tune result is a JSON object")
        try:
            return cls.from_dict(d)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None


def load_request(path: str | os.PathLike) -> dict[str, Any]:
    """A plan request from a JSON file: a request file (``graphbatch tune --out``) or a tune
    result file (its ``request``). Returns the keyword arguments of ``graphbatch.plan``; the
    strategy's options are checked by ``graphbatch.plan`` itself."""
    d = _read_json(path, "plan request")
    if isinstance(d, dict) and d.get("format") == TUNE_FORMAT:
        d = d.get("request")
    if not isinstance(d, dict) or not isinstance(d.get("strategy"), str):
        raise InputError(f'{path}: a request is a JSON object with a "strategy" name')
    return d
