"""Checks of a loader state before a resume, shared by the torch and JAX loaders.

A loader state (``state_dict()``) is a mapping with the ``epoch``, the ``offset`` (its batches or
steps consumed) and a ``fingerprint`` of the plan request. `resume_point` validates one against
the loader that loads it and returns where the next pass starts; every refusal is an
`InputError` (a ``ValueError``) naming the field, whatever the framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._errors import InputError
from ._validate import as_nonnegative_int

__all__ = ["MISSING_FINGERPRINT_OPT_IN", "resume_point"]

#: The keyword of ``load_state_dict`` that accepts a state without a fingerprint.
MISSING_FINGERPRINT_OPT_IN = "allow_missing_fingerprint"


def _check_mapping(state: Any, owner: str) -> Mapping[str, Any]:
    if not isinstance(state, Mapping):
        raise InputError(
            f"not a {owner} state: expected a dict from {owner}.state_dict(), got "
            f"{type(state).__name__} {state!r:.60}"
        )
    if "epoch" not in state:
        raise InputError(f"not a {owner} state: no 'epoch' key (keys: {sorted(map(str, state))})")
    return state


def _compare(saved: Any, mine: Any, owner: str) -> None:
    if isinstance(mine, Mapping):
        if not isinstance(saved, Mapping):
            raise InputError(
                f"state has fingerprint {saved!r:.80}; this {owner} records a dict "
                "(a state of another kind of loader?)"
            )
        for key in sorted(saved):
            if saved[key] != mine.get(key, "<absent>"):
                raise InputError(
                    f"state was saved with {key} = {saved[key]!r}, this {owner} has "
                    f"{mine.get(key, '<absent>')!r}: another plan request, resuming would skip "
                    "or repeat graphs"
                )
        for key in sorted(set(mine) - set(saved)):
            raise InputError(
                f"state has no {key!r} in its fingerprint; this {owner} has {key} = {mine[key]!r}"
            )
    elif saved != mine:
        raise InputError(
            f"state was saved for plan request {saved!r}; this {owner}'s is {mine!r} (different "
            "sizes, strategy, seed, batch size/budget, shuffle, options or number of ranks)"
        )


def resume_point(
    state: Any,
    *,
    owner: str,
    fingerprint: Any,
    recorded: Mapping[str, Any],
    total_of: Callable[[int], int],
    unit: str = "batches",
    allow_missing_fingerprint: bool = False,
) -> tuple[int, int]:
    """``(epoch, offset)`` where a loader resuming from ``state`` starts its next pass.

    ``fingerprint``: the loader's own (a dict compared field by field, or a string compared
    whole). A state without one (written before fingerprints) cannot show that it was saved with
    this loader's batch size, budget, shuffle, options and size table: it is refused unless
    ``allow_missing_fingerprint=True``, and then only the plain fields it holds that are in
    ``recorded`` (seed, strategy, number of ranks, number of graphs) are compared.
    ``total_of(epoch)``: the number of ``unit`` of that epoch; an offset at the end of its epoch
    resumes at the start of the next one."""
    state = _check_mapping(state, owner)
    if not isinstance(allow_missing_fingerprint, bool):
        raise InputError(
            f"{MISSING_FINGERPRINT_OPT_IN} must be True or False, got {allow_missing_fingerprint!r}"
        )
    saved = state.get("fingerprint")
    if saved is not None:
        _compare(saved, fingerprint, owner)
    elif not allow_missing_fingerprint:
        raise InputError(
            f"state has no 'fingerprint' (written before graphbatch recorded plan requests), so "
            f"nothing shows it was saved with this {owner}'s batch size, budget, shuffle, "
            "options and size table; resuming with other ones would skip or repeat graphs. "
            f"Pass {MISSING_FINGERPRINT_OPT_IN}=True to load_state_dict to resume anyway "
            "(the fields it holds are still compared)"
        )
    else:
        for key in sorted(k for k in recorded if k in state):
            if state[key] != recorded[key]:
                raise InputError(
                    f"state was saved with {key} = {state[key]!r}, this {owner} has "
                    f"{recorded[key]!r}; resuming would skip or repeat graphs"
                )
    epoch = as_nonnegative_int(state["epoch"], "epoch")
    offset = as_nonnegative_int(state.get("offset", 0), "offset")
    total = int(total_of(epoch))
    if offset > total:
        raise InputError(f"offset {offset} is past the {total} {unit} of epoch {epoch}")
    if offset == total:  # the epoch was complete: continue with the next one
        return epoch + 1, 0
    return epoch, offset
