"""The library's error types: what the CLI reports as one line (anything else is a bug and keeps
its traceback).

`InputError` and `InputTypeError` subclass `ValueError` and `TypeError`, so code that catches
those keeps working; `UnknownNameError` is an `InputError` for an unknown user-supplied name
(strategy, heuristic, ...), never a `KeyError`.
"""

from __future__ import annotations

__all__ = [
    "AtomsInputError",
    "BuildCancelled",
    "CaptureError",
    "EdgeIndexError",
    "GraphbatchError",
    "InputError",
    "InputTypeError",
    "PlanMismatchError",
    "ShardBuildError",
    "StoreFormatError",
    "UnknownNameError",
    "USER_ERRORS",
]


class GraphbatchError(Exception):
    """Base of the errors graphbatch raises on purpose for bad input or files."""


class InputError(GraphbatchError, ValueError):
    """A value, file or option graphbatch refuses; the message names it and the limit."""


class InputTypeError(GraphbatchError, TypeError):
    """An argument of the wrong type; the message names it and what was expected."""


class UnknownNameError(InputError):
    """An unknown user-supplied name; the message lists the known ones."""


class EdgeIndexError(InputError):
    """An edge index outside its own graph: damaged data, never returned as a batch (the store
    reports it as a `StoreFormatError` naming the file)."""


class StoreFormatError(InputError):
    """The file is not a readable graph store: truncated, corrupted, replaced, or another
    format/version (a `graphbatch.InputError`, so a ``ValueError``)."""


class AtomsInputError(InputError):
    """A structure graphbatch cannot store; the message names file, frame and field."""


class ShardBuildError(GraphbatchError, RuntimeError):
    """A shard of a sharded store could not be built (after the engine's retries); no manifest
    was written."""


class BuildCancelled(GraphbatchError, RuntimeError):
    """A sharded build was called off through its ``stop`` event (e.g. on SIGTERM): no manifest
    was written and the shards of this build were removed."""


class PlanMismatchError(GraphbatchError, RuntimeError):
    """Ranks (processes) of one distributed job hold different plans, or different inputs to
    them; raised on every rank with the same message, naming the ranks that disagree."""


class CaptureError(GraphbatchError, RuntimeError):
    """A training step that cannot run as a CUDA graph (`graphbatch.torch.TrainStep`): a host
    sync, a data-dependent shape, a tensor on the wrong device, an optimizer that is not
    capturable, or a value the captured graph keeps that changed; the message names it and
    where it happened."""


#: What the CLI and the demo report as one line with exit status 2: the library's own errors,
#: ``ValueError`` (the documented type of input validation, e.g. ``StoreFormatError``) and
#: ``OSError`` (files). A ``KeyError``, ``AttributeError``, ``ZeroDivisionError`` or plain
#: ``TypeError`` is a bug and keeps its traceback.
USER_ERRORS = (GraphbatchError, ValueError, OSError)
