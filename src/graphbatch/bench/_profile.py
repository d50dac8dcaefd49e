"""Profiles of a bench run's steps (``--profile-steps N``, torch runs): after the run's timed
steps, N more steps under ``torch.profiler``, summarised per step in the record's ``profile``
key. The profiled steps are not part of the record's timings or counts (the profiler slows
them); they show where a step's time goes: host operator calls, CUDA kernels launched and
their device time, and the entries that cost most."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["TOP_ENTRIES", "profile_steps"]

#: Entries listed in a profile's ``top`` (by self device time on CUDA, self host time on CPU).
TOP_ENTRIES = 12


def profile_steps(step: Callable[[], None], steps: int, cuda: bool) -> dict[str, Any]:
    """Run ``step()`` ``steps`` times under ``torch.profiler`` (host operators; CUDA kernels
    too when ``cuda``) and summarise per step (times in ms or µs per step, counts per step):

    - ``steps``; ``wall_ms``: wall time per step under the profiler (it adds its own cost);
    - ``host_ops``: host events (operators, nested ones included, and CUDA runtime calls);
    - ``kernels`` and ``device_ms``: CUDA kernels and memory operations run, and their summed
      device time (None on CPU);
    - ``top``: the `TOP_ENTRIES` entries with the most self device time (CUDA) or self host
      time (CPU): ``name``, ``calls``, ``self_host_us``, ``self_device_us``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    entries = [_entry(a, steps) for a in averages]
    on_device = [e for a, e in zip(averages, entries, strict=True) if _on_device(a)]
    host = [e for a, e in zip(averages, entries, strict=True) if not _on_device(a)]
    key = "self_device_us" if cuda else "self_host_us"
    top = sorted(entries, key=lambda e: e[key], reverse=True)[:TOP_ENTRIES]
    kernels = round(sum(e["calls"] for e in on_device), 2)
    device_ms = round(sum(e["self_device_us"] for e in on_device) / 1e3, 4)
    return {
        "steps": steps,
        "wall_ms": round(wall * 1e3 / steps, 4),
        "host_ops": round(sum(e["calls"] for e in host), 2),
        "kernels": kernels if cuda else None,
        "device_ms": device_ms if cuda else None,
        "top": top,
    }


def _entry(avg: Any, steps: int) -> dict[str, Any]:
    """One profiler average, per step."""
    return {
        "name": str(avg.key),
        "calls": round(avg.count / steps, 2),
        "self_host_us": round(float(avg.self_cpu_time_total) / steps, 2),
        "self_device_us": round(float(getattr(avg, "self_device_time_total", 0.0)) / steps, 2),
    }


def _on_device(avg: Any) -> bool:
    """Whether a profiler average is device work (a CUDA kernel or memory operation)."""
    return str(getattr(avg, "device_type", "")).rsplit(".", 1)[-1] not in ("CPU", "")
