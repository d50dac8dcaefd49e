"""The probes of `graphbatch.tune`: which candidate batch measures a probe shape
(`probe_specs`), which shapes the design may pick (`eligible`), and `Probing`, the probes
measured so far (first-call times, steady step samples, peak memory) and the fit of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ._backend import Backend, ProbeSpec
from ._candidates import ProfiledCandidate
from ._model import ProbeMeasurement, StepCostModel, fit_step_model

__all__ = ["MIN_SHARE_PER_MILLE", "Probing", "Progress", "eligible", "probe_specs", "say"]

#: A progress callback: called with a message before each stage (or ``None``: silent).
Progress = Callable[[str], None] | None


def say(progress: Progress, msg: str) -> None:
    """``progress(msg)`` unless ``progress`` is None."""
    if progress is not None:
        progress(msg)


def probe_specs(
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


class Probing:
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
            say(
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
        say(self.progress, f"settling round over {len(self.specs)} probes")
        for s in self.specs:
            for mode in self.backend.modes:
                self.backend.time_probe(s.key, mode)
        fresh: dict[tuple[int, str], list[float]] = {k: [] for k in self.samples}
        for r in range(rounds):
            say(self.progress, f"timing round {r + 1}/{rounds} over {len(self.specs)} probes")
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


def eligible(share: np.ndarray, count: int) -> np.ndarray:
    """The shapes the design may pick: those carrying at least `MIN_SHARE_PER_MILLE` of some
    candidate's steps, or every shape when fewer than ``count`` do."""
    ok = share >= MIN_SHARE_PER_MILLE
    return ok if int(ok.sum()) >= count else np.ones_like(ok)
