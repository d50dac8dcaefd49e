"""`EpochCursor`: the one place where a sampler's epoch and its position in that epoch live.

Every caller -- a plain loop, `PlanLoader.set_epoch`, Lightning calling ``sampler.set_epoch`` or
``batch_sampler.sampler.set_epoch``, the ``DistributedSampler`` idiom -- moves this one object,
and every iteration reads it when it starts. Rules:

- ``set_epoch(e)`` makes the next pass run epoch ``e`` from its first batch. It is a no-op when
  the next pass already is ``e`` (so a resume point loaded for ``e`` survives), and when a pass of
  epoch ``e`` has just been started and nothing of it was consumed (Lightning creates its
  iterator before it calls ``set_epoch``).
- A pass started and then overtaken, before its first batch was consumed, by ``set_epoch`` to
  another epoch or by ``resume_at`` is *superseded* (`EpochCursor.superseded`): whoever serves
  its batches starts a new pass instead, which runs what was set (Lightning resuming from an
  end-of-epoch checkpoint creates its iterator and then calls ``set_epoch(e + 1)``).
- A pass that ran to its end moves the cursor to epoch ``e + 1``, batch 0.
- A pass of which nothing was consumed does not count (a new pass repeats its epoch and start).
- A pass stopped early (``len`` reached by Lightning, ``islice``, ``limit_train_batches``,
  ``max_steps``, a ``break``): the next pass runs epoch ``e + 1`` unless ``set_epoch`` or
  ``load_state_dict`` said otherwise in between.
- ``offset`` counts the batches of ``epoch`` consumed; a loaded ``(epoch, offset)`` makes the next
  pass start at batch ``offset``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import as_nonnegative_int

__all__ = ["EpochCursor", "Pass"]


@dataclass(frozen=True)
class Pass:
    """One started iteration: its id (passes are numbered), epoch and first batch."""

    id: int
    epoch: int
    start: int


class EpochCursor:
    """Epoch and consumed-batch offset of a sampler (see the module docstring for the rules)."""

    __slots__ = ("epoch", "offset", "armed", "_pass_id", "_consumed")

    def __init__(self) -> None:
        self.epoch = 0  # epoch of the pass in progress (or of the next pass when armed)
        self.offset = 0  # batches of `epoch` consumed (or where the next pass starts when armed)
        self.armed = True  # True: the next pass runs (epoch, offset); False: epoch + 1 from 0
        self._pass_id = 0  # id of the latest pass (0: none yet)
        self._consumed = 0  # batches consumed from the latest pass

    # ------------------------------------------------------------- passes
    def begin(self) -> Pass:
        """Start a pass: returns what it iterates and makes it the latest pass. A started pass of
        which nothing was consumed does not count: the new pass runs its epoch and start again
        (``DataLoader`` with workers calls ``iter(batch_sampler)`` twice for one iterator)."""
        if not self.armed and self._consumed > 0:
            self.epoch += 1
            self.offset = 0
        self.armed = False
        self._pass_id += 1
        self._consumed = 0
        return Pass(self._pass_id, self.epoch, self.offset)

    def consumed(self, pass_id: int) -> None:
        """One batch of pass ``pass_id`` reached the consumer (ignored for superseded passes)."""
        if pass_id == self._pass_id and not self.armed:
            self.offset += 1
            self._consumed += 1

    def superseded(self, pass_id: int) -> bool:
        """Whether pass ``pass_id`` is the latest, nothing of it was consumed, and ``set_epoch``
        or ``resume_at`` has since chosen what the next pass runs: its iterator must start a
        new pass (`begin`) before it serves a batch."""
        return pass_id == self._pass_id and self.armed and self._consumed == 0

    def finished(self, pass_id: int) -> None:
        """Pass ``pass_id`` ran to its end: the next pass runs the following epoch."""
        if pass_id == self._pass_id and not self.armed:
            self.epoch += 1
            self.offset = 0
            self.armed = True

    # ------------------------------------------------------------ setters
    def set_epoch(self, epoch: int) -> None:
        epoch = as_nonnegative_int(epoch, "epoch")
        if epoch == self.epoch and (self.armed or (self._pass_id and self._consumed == 0)):
            return  # already the next pass, or the pass just started and untouched
        self.epoch = epoch
        self.offset = 0
        self.armed = True

    def resume_at(self, epoch: int, offset: int) -> None:
        """The next pass runs ``epoch`` from batch ``offset``."""
        self.epoch = epoch
        self.offset = offset
        self.armed = True

    @property
    def latest_pass(self) -> int:
        """Id of the latest started pass (0: none yet)."""
        return self._pass_id

    def __getstate__(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, object]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"EpochCursor(epoch={self.epoch}, offset={self.offset}, armed={self.armed})"
