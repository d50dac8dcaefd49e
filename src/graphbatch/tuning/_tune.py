"""`tune`: measure the user's step on a few probe shapes, fit the cost model, search the
configurations, validate the best ones.

1. Candidates (`candidate_requests`) are planned and profiled (exact step shapes and counts).
2. Design probes: about 60% of ``probes`` spread over the candidates' shapes
   (`design_probes`); each probe is a real batch of a candidate's plan at that shape. Every
   probe's first step is timed (compilation included), then ``rounds`` interleaved rounds
   time one step per probe and mode (so a load change on a shared machine hits every probe),
   after one untimed round (a compilation's background work settles).
3. A first fit ranks the candidates; the rest of the probes go to the shapes the leaders use
   most (`targeted_probes`), then every probe is timed again in ``rounds`` rounds (these
   timings alone, all taken after the last compilation, make the final fit) and its peak
   memory measured, and the final models are fitted (`fit_step_model`).
4. The ranking (`rank`) picks the configuration; ``validate=K`` trains the top K for
   ``validate_steps`` steps each (interleaved) and records predicted beside measured
   (`graphbatch.tuning._validation`: a measurement it cannot trust is taken again, then
   flagged); `break_even` sets the best compiled configuration against the best eager one.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .._errors import InputError
from .._validate import as_nonnegative_int, as_positive_int
from .._version import __version__
from ._backend import Backend, ProbeSpec
from ._candidates import (
    ProfiledCandidate,
    candidate_requests,
    cost_bucket_requests,
    profile_candidates,
    shape_cloud,
    tolerance_per_mille,
)
from ._design import design_probes, targeted_probes
from ._model import ProbeMeasurement, StepCostModel, fit_step_model
from ._result import TuneResult
from ._search import Prediction, break_even, rank
from ._validation import measure_configs, worst_step
from ._validation import validate as validate_configs

__all__ = ["tune", "measure_configs", "parse_memory", "worst_step", "MAX_PROBES"]

#: Most probe shapes `tune` measures.
MAX_PROBES = 20

#: A progress callback: called with a message before each stage (or ``None``: silent).
Progress = Callable[[str], None] | None

_UNITS = {
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}


def parse_memory(value: int | float | str | None) -> int | None:
    """Bytes from an int (bytes), a float (GiB) or a string such as ``"2.5GiB"``, ``"800M"``
    (binary units; a bare number is GiB). ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(f"memory limit must be bytes or a size such as '4GiB', got {value!r}")
    if isinstance(value, (int, np.integer)):
        b = int(value)
    elif isinstance(value, float):
        b = int(value * 2**30)
    else:
        text = str(value).strip().lower().replace(" ", "")
        num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(num) :] or "gib"
        if unit not in _UNITS:
            raise InputError(
                f"memory limit {value!r}: unknown unit {unit!r} (use B, KiB, MiB, GiB, TiB)"
            )
        try:
            b = int(float(num) * _UNITS[unit])
        except ValueError:
            raise InputError(f"memory limit {value!r} is not a size such as '4GiB'") from None
    if b <= 0:
        raise InputError(f"memory limit must be > 0 bytes, got {value!r}")
    return b


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def _probe_specs(
    profiled: Sequence[ProfiledCandidate],
    shapes: np.ndarray,
    indices: Iterable[int],
    start_key: int,
    phase: str,
    world_size: int,
) -> list[ProbeSpec]:
    """A probe per shape index: the batch of the first candidate (in order) that meets the
    shape, at the step where it first appears."""
    out = []
    for j, i in enumerate(indices):
        target = (int(shapes[i][0]), int(shapes[i][1]), int(shapes[i][2]))
        for pc in profiled:
            try:
                epoch, step = pc.profile.where(target)
            except KeyError:
                continue
            out.append(
                ProbeSpec(
                    start_key + j,
                    target,
                    dict(pc.candidate.request),
                    epoch,
                    step,
                    world_size,
                    f"{pc.candidate.label} [{phase}]",
                )
            )
            break
    return out


class _Probing:
    """The probes measured so far: first-call times, steady step samples, peaks."""

    def __init__(self, backend: Backend, progress: Progress) -> None:
        self.backend, self.progress = backend, progress
        self.specs: list[ProbeSpec] = []
        self.phase: dict[int, str] = {}
        self.first: dict[tuple[int, str], float] = {}
        self.samples: dict[tuple[int, str], list[float]] = {}
        self.peak: dict[tuple[int, str], int | None] = {}

    def add(self, specs: Sequence[ProbeSpec], phase: str) -> None:
        for s in specs:
            _say(
                self.progress,
                f"probe {len(self.specs) + 1}: shape {list(s.shape)} (first step, compiling)",
            )
            first = self.backend.add_probe(s)
            self.specs.append(s)
            self.phase[s.key] = phase
            for mode, ms in first.items():
                self.first[(s.key, mode)] = float(ms)
                self.samples.setdefault((s.key, mode), [])

    def time_rounds(self, rounds: int) -> None:
        """One untimed round (a compilation's background work and the first runs after it
        settle), then ``rounds`` rounds over the probes and modes, interleaved: in each, two
        steps back to back of which the second is timed; they replace earlier samples (a fit
        uses timings taken after every compilation)."""
        _say(self.progress, f"settling round over {len(self.specs)} probes")
        for s in self.specs:
            for mode in self.backend.modes:
                self.backend.time_probe(s.key, mode)
        fresh: dict[tuple[int, str], list[float]] = {k: [] for k in self.samples}
        for r in range(rounds):
            _say(self.progress, f"timing round {r + 1}/{rounds} over {len(self.specs)} probes")
            for s in self.specs:
                for mode in self.backend.modes:
                    # a step of the same shape first: timed as in training, where a shape
                    # follows itself, not right after a step of another size
                    self.backend.time_probe(s.key, mode)
                    fresh[(s.key, mode)].append(float(self.backend.time_probe(s.key, mode)))
        self.samples = fresh

    def measure_memory(self) -> None:
        for s in self.specs:
            for mode in self.backend.modes:
                if (s.key, mode) not in self.peak:
                    self.peak[(s.key, mode)] = self.backend.probe_memory(s.key, mode)

    def measurements(self) -> list[ProbeMeasurement]:
        out = []
        for s in self.specs:
            for mode in self.backend.modes:
                out.append(
                    ProbeMeasurement(
                        s.shape,
                        mode,
                        tuple(self.samples[(s.key, mode)]),
                        self.first[(s.key, mode)],
                        self.peak.get((s.key, mode)),
                        s.label,
                        self.phase[s.key],
                    )
                )
        return out

    def fit(self) -> dict[str, StepCostModel]:
        ms = self.measurements()
        return {mode: fit_step_model(mode, ms) for mode in self.backend.modes}


#: Per mille of some candidate's steps a shape needs to be a design probe.
MIN_SHARE_PER_MILLE = 20


def _eligible(share: np.ndarray, count: int) -> np.ndarray:
    """The shapes the design may pick: those carrying at least `MIN_SHARE_PER_MILLE` of some
    candidate's steps, or every shape when fewer than ``count`` do."""
    ok = share >= MIN_SHARE_PER_MILLE
    return ok if int(ok.sum()) >= count else np.ones_like(ok)


def _leaders(ranking: Sequence[Prediction], count: int) -> list[Prediction]:
    """The best ``count`` predictions of distinct configurations (one mode each)."""
    out, seen = [], set()
    for p in ranking:
        if p.label in seen or not p.feasible:
            continue
        seen.add(p.label)
        out.append(p)
        if len(out) >= count:
            break
    return out


def _make_backend(
    source: Any,
    *,
    model: str | Callable[..., Any],
    framework: str,
    device: str,
    compile: str,
    threads: int | None,
    seed: int,
    progress: Progress,
) -> Backend:
    if framework == "torch":
        from ._torch_backend import TorchBackend

        modes = {"both": ("compiled", "eager"), "on": ("compiled",), "off": ("eager",)}
        if compile not in modes:
            raise InputError(f"compile must be one of both, on, off, got {compile!r}")
        return TorchBackend(
            source,
            model=model,
            device=device,
            modes=modes[compile],
            threads=threads,
            seed=seed,
            progress=progress,
        )
    if framework == "jax":
        from ._jax_backend import JaxBackend

        if compile not in ("both", "on"):
            raise InputError(
                "--framework jax always compiles (jax.jit); compile='off' does not apply"
            )
        return JaxBackend(source, model=model, device=device, seed=seed, progress=progress)
    raise InputError(f"framework must be torch or jax, got {framework!r}")


def tune(
    source: Any,
    *,
    model: str | Callable[..., Any] = "schnet",
    framework: str = "torch",
    device: str = "cpu",
    batch_size: int = 128,
    epochs: int = 10,
    memory_limit: int | float | str | None = None,
    world_size: int = 1,
    validate: int = 0,
    validate_steps: int = 20,
    validate_retries: int = 2,
    probes: int = 8,
    rounds: int = 5,
    compile: str = "both",
    batch_tolerance: float = 0.1,
    strategies: Sequence[str] | None = None,
    max_shapes: int = 8,
    seed: int = 0,
    threads: int | None = None,
    on_oversize: str = "error",
    backend: Backend | None = None,
    progress: Callable[[str], None] | None = None,
) -> TuneResult:
    """Pick the batching configuration that trains ``source`` fastest with ``model`` on this
    machine, from step costs measured on the model itself.

    ``source``: a `graphbatch.datasets.GraphStore` (or its path), a map-style dataset the
    loaders accept, or a size table (`GraphSizes` / ``.npz``: the probes then use synthetic
    graphs of those sizes). ``model``: ``schnet``, ``mpeu``, ``painn``, ``mace`` (torch) or a
    factory (a callable, or ``"MODULE:FACTORY"``; see docs/tune.md for the protocol).
    ``framework``: ``torch`` or ``jax``; ``device``: ``cpu`` or ``cuda`` (``gpu`` for JAX).
    ``batch_size``: the nominal batch size; configurations use batch sizes within
    ``batch_tolerance`` (a fraction) of it. ``epochs``: the training length over which
    compilation is amortised. ``memory_limit``: bytes, or a size such as ``"4GiB"``: a hard limit
    on the predicted peak of the worst batch. ``world_size``: ranks per step (distributed plans;
    adds the balancing strategies). ``validate``: train the top K configurations for
    ``validate_steps`` steps each and record predicted beside measured; a measurement the
    machine disturbed (see `graphbatch.tuning._validation`) is measured again up to
    ``validate_retries`` times, then reported with ``trusted: False``. ``probes``: probe shapes
    (at most 20); ``rounds``: timed steps per probe and mode. ``compile`` (torch): ``both``
    (compiled and eager steps are measured and either may win), ``on`` or ``off``.
    ``backend``: measure with this `Backend` instead (e.g. a `SimulatedBackend`).
    ``progress(message)`` is called before each stage.

    Returns a `TuneResult`; ``result.request`` goes unchanged to ``graphbatch.plan(sizes,
    **result.request)``, ``graphbatch.torch.loader(dataset, **result.request)`` and
    ``graphbatch.jax.loader(source, **result.request)``.
    """
    t_start = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    probes = as_positive_int(probes, "probes")
    if probes > MAX_PROBES:
        raise InputError(f"probes = {probes} exceeds the limit {MAX_PROBES}")
    if probes < 2:
        raise InputError(f"probes = {probes}: the fit needs at least 2 probe shapes")
    rounds = as_positive_int(rounds, "rounds")
    epochs = as_positive_int(epochs, "epochs")
    validate = as_nonnegative_int(validate, "validate")
    validate_steps = as_positive_int(validate_steps, "validate_steps")
    validate_retries = as_nonnegative_int(validate_retries, "validate_retries")
    world_size = as_positive_int(world_size, "world_size")
    limit = parse_memory(memory_limit)
    tolerance_per_mille(batch_tolerance)  # bad input fails before any model is built
    if backend is None and framework == "jax" and world_size != 1:
        raise InputError("tune --framework jax measures one device; world_size must be 1")
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    own_backend = backend is None
    if backend is None:
        backend = _make_backend(
            source,
            model=model,
            framework=framework,
            device=device,
            compile=compile,
            threads=threads,
            seed=seed,
            progress=progress,
        )
    seconds["setup"] = time.perf_counter() - t0
    try:
        return _tune(
            backend,
            t_start=t_start,
            load_start=load_start,
            seconds=seconds,
            model=model,
            batch_size=batch_size,
            epochs=epochs,
            limit=limit,
            world_size=world_size,
            validate=validate,
            validate_steps=validate_steps,
            validate_retries=validate_retries,
            probes=probes,
            rounds=rounds,
            batch_tolerance=batch_tolerance,
            strategies=strategies,
            max_shapes=max_shapes,
            seed=seed,
            on_oversize=on_oversize,
            progress=progress,
        )
    finally:
        if own_backend:
            backend.close()


def _tune(
    backend: Backend,
    *,
    t_start: float,
    load_start: tuple[float, float, float] | None,
    seconds: dict[str, float],
    model: str | Callable[..., Any],
    batch_size: int,
    epochs: int,
    limit: int | None,
    world_size: int,
    validate: int,
    validate_steps: int,
    validate_retries: int,
    probes: int,
    rounds: int,
    batch_tolerance: float,
    strategies: Sequence[str] | None,
    max_shapes: int,
    seed: int,
    on_oversize: str,
    progress: Progress,
) -> TuneResult:
    sizes = backend.graph_sizes()
    if len(sizes) == 0:
        raise InputError("the source holds no graphs")
    if limit is not None and backend.memory_kind == "none":
        raise InputError(
            f"memory_limit needs a peak-memory measure; this backend ({backend.framework}) has none"
        )

    t0 = time.perf_counter()
    _say(progress, "planning candidate configurations")
    cands = candidate_requests(
        sizes,
        batch_size,
        tolerance=batch_tolerance,
        strategies=strategies,
        world_size=world_size,
        seed=seed,
        max_shapes=max_shapes,
    )
    profiled, failed = profile_candidates(
        sizes, cands, world_size=world_size, epochs=epochs, on_oversize=on_oversize
    )
    if not profiled:
        raise InputError(
            "no candidate configuration could be planned: "
            + "; ".join(f"{f['label']}: {f['error']}" for f in failed[:3])
        )
    profiles = {pc.candidate.label: pc.profile for pc in profiled}
    cloud, weights, share = shape_cloud(profiled)
    seconds["planning"] = time.perf_counter() - t0

    # design probes, a first fit and ranking, then probes where the leaders run
    t0 = time.perf_counter()
    probing = _Probing(backend, progress)
    n_design = min(probes, max(2, (probes * 6 + 9) // 10))
    design = design_probes(cloud, weights, n_design, eligible=_eligible(share, n_design))
    probing.add(_probe_specs(profiled, cloud, design, 0, "design", world_size), "design")
    probing.time_rounds(max(2, rounds // 2))
    if limit is not None:
        probing.measure_memory()
    models = probing.fit()
    if strategies is None or "buckets" in strategies:
        # buckets whose tight shapes minimise this model's predicted time (and compiles)
        by_cost = [
            c
            for mode, m in models.items()
            for c in cost_bucket_requests(
                sizes,
                batch_size,
                m.shape_cost(epochs),
                label=f"by {mode} cost",
                seed=seed,
                max_shapes=max_shapes,
            )
        ]
        more, bad = profile_candidates(
            sizes, by_cost, world_size=world_size, epochs=epochs, on_oversize=on_oversize
        )
        seen = {pc.profile.key() for pc in profiled}
        profiled += [pc for pc in more if pc.profile.key() not in seen]
        failed += bad
        cands = list(cands) + by_cost
        profiles = {pc.candidate.label: pc.profile for pc in profiled}
        cloud, weights, share = shape_cloud(profiled)
        design = [
            int(np.flatnonzero((cloud == np.asarray(sp.shape)).all(axis=1))[0])
            for sp in probing.specs
        ]
    first_rank = rank(profiled, list(models.values()), epochs=epochs, memory_limit=limit)
    leaders = _leaders(first_rank, max(validate, 3))
    extra = targeted_probes(
        cloud,
        [(profiles[p.label].shapes, profiles[p.label].steps) for p in leaders],
        design,
        probes - len(design),
    )
    probing.add(
        _probe_specs(profiled, cloud, extra, len(design), "targeted", world_size), "targeted"
    )
    probing.time_rounds(rounds)
    probing.measure_memory()
    models = probing.fit()
    seconds["probing"] = time.perf_counter() - t0

    ranking = rank(profiled, list(models.values()), epochs=epochs, memory_limit=limit)
    if not ranking[0].feasible:
        raise InputError(
            f"no configuration fits memory_limit = {limit} bytes: the best, "
            f"{ranking[0].label}, {ranking[0].reason}"
        )
    t0 = time.perf_counter()
    validation: list[dict[str, Any]] = []
    if validate:
        # the load gauge: the chosen mode's first design probe (the most used shape), timed
        # once per validation round; its probe-phase median is in the fitted model's probes
        ref = (probing.specs[0].key, ranking[0].mode)
        validation = validate_configs(
            backend,
            _leaders(ranking, validate),
            profiles,
            models,
            validate_steps,
            world_size,
            progress,
            reference=ref,
            probe_ms=float(np.median(probing.samples[ref])),
            retries=validate_retries,
        )
    seconds["validation"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    best = ranking[0]
    settings = {
        "model": model if isinstance(model, str) else getattr(model, "__qualname__", repr(model)),
        "framework": backend.framework,
        "device": backend.device,
        "batch_size": int(batch_size),
        "batch_tolerance": float(batch_tolerance),
        "epochs": epochs,
        "memory_limit": limit,
        "world_size": world_size,
        "probes": len(probing.specs),
        "rounds": rounds,
        "validate": validate,
        "validate_steps": validate_steps,
        "validate_retries": validate_retries,
        "seed": int(seed),
        "num_graphs": len(sizes),
        "candidates": len(cands),
        "distinct_candidates": len(profiled),
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "load_start": None if load_start is None else [round(x, 2) for x in load_start],
        "load_end": ([round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "graphbatch": __version__,
        **backend.info(),
    }
    return TuneResult(
        request=dict(best.request),
        mode=best.mode,
        world_size=world_size,
        ranking=ranking,
        models=models,
        validation=validation,
        failed=failed,
        settings=settings,
        break_even=break_even(ranking),
    )
