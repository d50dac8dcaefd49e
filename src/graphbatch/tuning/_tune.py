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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import InputError
from .._sizes import GraphSizes
from .._version import __version__
from ._backend import Backend
from ._candidates import (
    Candidate,
    ProfiledCandidate,
    candidate_requests,
    cost_bucket_requests,
    profile_candidates,
    shape_cloud,
)
from ._design import design_probes, targeted_probes
from ._model import StepCostModel
from ._probing import Probing, Progress, eligible, probe_specs, say
from ._profile import PlanProfile
from ._result import TuneResult
from ._search import Prediction, break_even, rank
from ._settings import MAX_PROBES, TuneSettings, parse_memory
from ._validation import measure_configs, worst_step
from ._validation import validate as validate_configs

__all__ = ["tune", "measure_configs", "parse_memory", "worst_step", "MAX_PROBES"]


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
    clock = _Clock()
    settings = TuneSettings.checked(
        model=model,
        batch_size=batch_size,
        epochs=epochs,
        memory_limit=memory_limit,
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
    )
    if backend is None and framework == "jax" and settings.world_size != 1:
        raise InputError("tune --framework jax measures one device; world_size must be 1")
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
            seed=settings.seed,
            progress=progress,
        )
    clock.seconds["setup"] = time.perf_counter() - t0
    try:
        return _tune(backend, settings, clock, progress)
    finally:
        if own_backend:
            backend.close()


@dataclass
class _Clock:
    """When the `tune` call started (``perf_counter`` seconds), the load average then, and
    the seconds of each stage so far."""

    start: float = field(default_factory=time.perf_counter)
    load_start: tuple[float, float, float] | None = field(
        default_factory=lambda: os.getloadavg() if hasattr(os, "getloadavg") else None
    )
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class _Candidates:
    """The candidate requests so far, their plans' profiles (distinct plans only) and the
    ones that could not be planned; `refresh` derives the profiles by label and the shape
    cloud (shapes, weights, per mille shares) after candidates are added."""

    requests: list[Candidate]
    profiled: list[ProfiledCandidate]
    failed: list[dict[str, str]]
    profiles: dict[str, PlanProfile] = field(default_factory=dict)
    cloud: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    share: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def refresh(self) -> None:
        self.profiles = {pc.candidate.label: pc.profile for pc in self.profiled}
        self.cloud, self.weights, self.share = shape_cloud(self.profiled)

    def add(self, requests: Sequence[Candidate], sizes: GraphSizes, s: TuneSettings) -> None:
        """Profile ``requests`` and keep those whose plans are new."""
        more, bad = _profile(sizes, requests, s)
        seen = {pc.profile.key() for pc in self.profiled}
        self.profiled += [pc for pc in more if pc.profile.key() not in seen]
        self.failed += bad
        self.requests += list(requests)
        self.refresh()


def _profile(
    sizes: GraphSizes, requests: Sequence[Candidate], s: TuneSettings
) -> tuple[list[ProfiledCandidate], list[dict[str, str]]]:
    return profile_candidates(
        sizes, requests, world_size=s.world_size, epochs=s.epochs, on_oversize=s.on_oversize
    )


def _plan_candidates(sizes: GraphSizes, s: TuneSettings, progress: Progress) -> _Candidates:
    """Stage 1: the candidate requests at the nominal batch size and their plan profiles."""
    say(progress, "planning candidate configurations")
    requests = candidate_requests(
        sizes,
        s.batch_size,
        tolerance=s.batch_tolerance,
        strategies=s.strategies,
        world_size=s.world_size,
        seed=s.seed,
        max_shapes=s.max_shapes,
    )
    profiled, failed = _profile(sizes, requests, s)
    if not profiled:
        raise InputError(
            "no candidate configuration could be planned: "
            + "; ".join(f"{f['label']}: {f['error']}" for f in failed[:3])
        )
    out = _Candidates(list(requests), profiled, failed)
    out.refresh()
    return out


def _add_cost_buckets(
    cands: _Candidates,
    models: dict[str, StepCostModel],
    sizes: GraphSizes,
    s: TuneSettings,
) -> None:
    """Buckets whose tight shapes minimise each mode's predicted time (and compiles) under
    the first fit, added to the candidates."""
    by_cost = [
        c
        for mode, m in models.items()
        for c in cost_bucket_requests(
            sizes,
            s.batch_size,
            m.shape_cost(s.epochs),
            label=f"by {mode} cost",
            seed=s.seed,
            max_shapes=s.max_shapes,
        )
    ]
    cands.add(by_cost, sizes, s)


def _probe(
    backend: Backend, cands: _Candidates, sizes: GraphSizes, s: TuneSettings, progress: Progress
) -> tuple[Probing, dict[str, StepCostModel]]:
    """Stages 2-3: design probes, a first fit and ranking (with the cost-chosen buckets among
    the candidates), probes where the leaders run, then every probe timed again and the final
    fit."""
    probing = Probing(backend, progress)
    n_design = min(s.probes, max(2, (s.probes * 6 + 9) // 10))
    design = design_probes(
        cands.cloud, cands.weights, n_design, eligible=eligible(cands.share, n_design)
    )
    specs = probe_specs(cands.profiled, cands.cloud, design, 0, "design", s.world_size)
    probing.add(specs, "design")
    probing.time_rounds(max(2, s.rounds // 2))
    if s.memory_limit is not None:
        probing.measure_memory()
    models = probing.fit()
    if s.strategies is None or "buckets" in s.strategies:
        _add_cost_buckets(cands, models, sizes, s)
        design = [
            int(np.flatnonzero((cands.cloud == np.asarray(sp.shape)).all(axis=1))[0])
            for sp in probing.specs
        ]
    first_rank = rank(
        cands.profiled, list(models.values()), epochs=s.epochs, memory_limit=s.memory_limit
    )
    leaders = _leaders(first_rank, max(s.validate, 3))
    extra = targeted_probes(
        cands.cloud,
        [(cands.profiles[p.label].shapes, cands.profiles[p.label].steps) for p in leaders],
        design,
        s.probes - len(design),
    )
    specs = probe_specs(cands.profiled, cands.cloud, extra, len(design), "targeted", s.world_size)
    probing.add(specs, "targeted")
    probing.time_rounds(s.rounds)
    probing.measure_memory()
    return probing, probing.fit()


def _validate(
    backend: Backend,
    ranking: Sequence[Prediction],
    cands: _Candidates,
    probing: Probing,
    models: dict[str, StepCostModel],
    s: TuneSettings,
    progress: Progress,
) -> list[dict[str, Any]]:
    """Stage 4: the top ``s.validate`` configurations trained and measured (none when 0)."""
    if not s.validate:
        return []
    # the load gauge: the chosen mode's first design probe (the most used shape), timed
    # once per validation round; its probe-phase median is in the fitted model's probes
    ref = (probing.specs[0].key, ranking[0].mode)
    return validate_configs(
        backend,
        _leaders(ranking, s.validate),
        cands.profiles,
        models,
        s.validate_steps,
        s.world_size,
        progress,
        reference=ref,
        probe_ms=float(np.median(probing.samples[ref])),
        retries=s.validate_retries,
    )


def _tune(backend: Backend, s: TuneSettings, clock: _Clock, progress: Progress) -> TuneResult:
    """The stages of `tune` on ``backend`` (see the module docstring), timed on ``clock``."""
    sizes = backend.graph_sizes()
    if len(sizes) == 0:
        raise InputError("the source holds no graphs")
    if s.memory_limit is not None and backend.memory_kind == "none":
        raise InputError(
            f"memory_limit needs a peak-memory measure; this backend ({backend.framework}) has none"
        )
    seconds = clock.seconds
    t0 = time.perf_counter()
    cands = _plan_candidates(sizes, s, progress)
    seconds["planning"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    probing, models = _probe(backend, cands, sizes, s, progress)
    seconds["probing"] = time.perf_counter() - t0
    ranking = rank(
        cands.profiled, list(models.values()), epochs=s.epochs, memory_limit=s.memory_limit
    )
    if not ranking[0].feasible:
        raise InputError(
            f"no configuration fits memory_limit = {s.memory_limit} bytes: the best, "
            f"{ranking[0].label}, {ranking[0].reason}"
        )
    t0 = time.perf_counter()
    validation = _validate(backend, ranking, cands, probing, models, s, progress)
    seconds["validation"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - clock.start
    best = ranking[0]
    return TuneResult(
        request=dict(best.request),
        mode=best.mode,
        world_size=s.world_size,
        ranking=ranking,
        models=models,
        validation=validation,
        failed=cands.failed,
        settings=_settings_record(backend, s, clock, cands, probing, len(sizes)),
        break_even=break_even(ranking),
    )


def _settings_record(
    backend: Backend,
    s: TuneSettings,
    clock: _Clock,
    cands: _Candidates,
    probing: Probing,
    num_graphs: int,
) -> dict[str, Any]:
    """The result's ``settings``: what was asked, what was measured, the stages' seconds,
    the machine's load before and after, versions and the backend's own keys."""
    model = s.model
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "model": model if isinstance(model, str) else getattr(model, "__qualname__", repr(model)),
        "framework": backend.framework,
        "device": backend.device,
        "batch_size": int(s.batch_size),
        "batch_tolerance": float(s.batch_tolerance),
        "epochs": s.epochs,
        "memory_limit": s.memory_limit,
        "world_size": s.world_size,
        "probes": len(probing.specs),
        "rounds": s.rounds,
        "validate": s.validate,
        "validate_steps": s.validate_steps,
        "validate_retries": s.validate_retries,
        "seed": int(s.seed),
        "num_graphs": num_graphs,
        "candidates": len(cands.requests),
        "distinct_candidates": len(cands.profiled),
        "seconds": {k: round(v, 2) for k, v in clock.seconds.items()},
        "load_start": None if clock.load_start is None else [round(x, 2) for x in clock.load_start],
        "load_end": None if load_end is None else [round(x, 2) for x in load_end],
        "machine": platform.machine(),
        "python": platform.python_version(),
        "graphbatch": __version__,
        **backend.info(),
    }
