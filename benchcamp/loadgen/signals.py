"""Ctrl-C as a flag while a point runs, raised where the poll loop can act on it.

With Python's default handler, SIGINT raises KeyboardInterrupt in whatever the main thread is
running. When that is a finalizer (an asyncio transport's ``__del__`` run by the garbage
collector, as happens under a test runner or with an in-process server), Python prints
"Exception ignored in ..." and drops the exception: the point then ran to the end of its window
as if nobody had pressed Ctrl-C. A handler that only records the signal cannot be lost that way;
the poll loop checks it every tick and raises KeyboardInterrupt itself.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class InterruptFlag:
    """Set by SIGINT (and by SIGTERM where the caller made it mean Ctrl-C) while installed."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def _handler(self, signum: int, frame: object) -> None:
        self.signum = signum

    def raise_if_set(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt


@contextmanager
def interrupts_as_flag() -> Iterator[InterruptFlag]:
    """Replace the handlers that raise KeyboardInterrupt (SIGINT's default; SIGTERM under
    ``sigterm_as_interrupt``) with one that sets the flag, and put them back on exit. Signals
    that are ignored or have a handler of their own are left alone, and so is everything off the
    main thread (where handlers cannot be set)."""
    flag = InterruptFlag()
    replaced: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is signal.default_int_handler:
                replaced[sig] = signal.signal(sig, flag._handler)
    try:
        yield flag
    finally:
        for sig, previous in replaced.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
