"""How ``graphbatch data build`` stops on SIGTERM or SIGINT: cleanly, with one line.

A single-file build is unwound by an exception (`run_stoppable`: the writer deletes its
temporaries on the way out); a sharded build is called off through its ``stop`` event (the
caller routes the signals with `on_stop_signals`). Either way the first signal decides the exit
status, ``128 + signal`` (`say_terminated`), and later ones change nothing.
"""

from __future__ import annotations

import signal
import sys

__all__ = [
    "note_stop_signal",
    "on_stop_signals",
    "restore_handlers",
    "run_stoppable",
    "say_terminated",
]


class _Terminated(SystemExit):
    """SIGTERM or SIGINT during a single-file build: unwinds through the writer (which deletes
    its temporaries) like any exit, past ``except Exception`` blocks."""


#: The signal that stopped this build (the first one; later ones are ignored).
_STOPPED_BY: list[int] = []

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def note_stop_signal(signum: int) -> bool:
    """Note a stop signal; whether it is the first (a later one -- Ctrl-C pressed twice --
    changes nothing: the first one's cleanup runs to its end)."""
    if _STOPPED_BY:
        return False
    _STOPPED_BY.append(signum)
    return True


def _terminate_cleanly(signum, frame):
    if note_stop_signal(signum):
        raise _Terminated(128 + signum)


def on_stop_signals(handler) -> dict:
    """Route SIGTERM and SIGINT (Ctrl-C; the build's worker processes ignore it) to
    ``handler``; returns the handlers they had."""
    return {signum: signal.signal(signum, handler) for signum in _STOP_SIGNALS}


def restore_handlers(previous: dict) -> None:
    """The handlers before the build, unless a signal stopped it (then later ones stay
    ignored until the process exits)."""
    if not _STOPPED_BY:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def say_terminated(what: str) -> int:
    """The one line of a build stopped by a signal; returns its exit status, 128 + signal.
    Later stop signals are ignored from here on: the interpreter's shutdown resets Python's
    handlers to the default action, which would end the process by the signal instead of
    with this status."""
    try:
        on_stop_signals(signal.SIG_IGN)
        signal.getsignal(signal.SIGINT)  # a call: a signal caught meanwhile is handled here
    except OSError:  # "Signal N ignored due to race condition": it was caught before
        pass
    signum = _STOPPED_BY[0] if _STOPPED_BY else signal.SIGTERM
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    print(f"graphbatch data: {word} ({signal.Signals(signum).name}); {what}", file=sys.stderr)
    return 128 + signum


def run_stoppable(out: str, build, *args, **kwargs):
    """``build(*args, **kwargs)`` with SIGTERM and SIGINT stopping it cleanly: the report, or
    the exit status of the one line `say_terminated` printed. Whatever the build raised
    once a signal arrived (a worker pool ended under it, say) is the signal's doing."""
    previous = on_stop_signals(_terminate_cleanly)
    try:
        return build(*args, **kwargs)
    except BaseException:
        if _STOPPED_BY:
            return say_terminated(f"nothing was written to {out} (temporaries removed)")
        raise
    finally:
        restore_handlers(previous)
