"""Whose turn it is on the context: the engine's lock protocol, apart from what a turn does.

Threads: each request's thread consumes its own generation (:meth:`plookup.engine.Engine.tokens`).
A consumer whose queue is empty steps if the context is free; that step advances every generation,
so the others find their tokens waiting, and a consumer that finds the context taken waits for the
step to end rather than for the context (a lock is not fair: a thread stepping in a loop would get
it back first). Requests waiting for a slot and generations given back are queued, and whoever
holds the context next hands out and takes back the slots. With one slot this is a single
stream's loop, on the caller's thread, with nothing in between.

:class:`Turns` knows nothing of models, slots or steps: a subclass says what handing out, taking
back, superseding and owning the whole context do (:class:`plookup.engine.admission.Admission`),
so the protocol is testable without a model (tests/unit/test_turns.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from typing import Iterator


class Turns:
    """The context's lock, the queues that whoever holds it next works off, and the signal that
    a turn has ended. Subclasses give the bookkeeping: :meth:`_take_back`, :meth:`_hand_out`,
    :meth:`_supersede`, :meth:`active` and :meth:`_own_context`."""

    def __init__(self) -> None:
        # The context: held by whoever steps or changes the cache, never waited for by a thread
        # that has something else to do (a lock is not fair, and a consumer stepping in a loop
        # would get it back before a waiting one woke up).
        self._lock = threading.Lock()
        # Under its own lock: the requests waiting for a slot, the generations given back, and
        # the signal that a step has ended, a slot was freed or a request is waiting.
        self._changed = threading.Condition()
        self._waiting: deque = deque()
        self._given_back: deque = deque()
        self._held = False  # one caller has the whole context (see exclusive)

    # -- the bookkeeping, done by whoever holds the context (subclasses)

    def _take_back(self) -> None:
        """Work off ``_given_back`` (holding the context)."""

    def _hand_out(self) -> None:
        """Work off ``_waiting`` unless ``_held`` (holding the context)."""

    def _supersede(self) -> None:
        """End what would keep :meth:`exclusive` waiting forever (holding the context and the
        condition's lock)."""

    def active(self) -> int:
        """How many generations run: :meth:`exclusive` waits until none does."""
        return 0

    def _own_context(self) -> None:
        """Make the context one caller's alone (holding it, once nothing runs)."""

    # -- whoever holds the context does the bookkeeping others asked for

    def _run(self, work) -> bool:
        """Run `work()` holding the context if it is free now, after handing out the slots and
        taking back the generations that others left queued; False if another thread holds it."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._take_back()
            self._hand_out()
            work()
        finally:
            self._lock.release()
            with self._changed:
                self._changed.notify_all()
        return True

    def _wait(self, until, work=None) -> None:
        """Until `until()`: `work` (a step) whenever the context is free, or else the queued
        bookkeeping; when another thread holds the context, wait for its signal (with a short
        timeout: the signal may come just before the wait)."""
        while not until():
            if self._run(work or (lambda: None)) and work is not None:
                continue
            with self._changed:
                if not until():
                    self._changed.wait(timeout=0.01)

    def _wait_for(self, work) -> None:
        """`work()` once, holding the context."""
        done = []
        self._wait(lambda: bool(done), lambda: done.append(work()))

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The whole context for one caller (llama_cpp's own plain decoding on sequence 0, whose
        cache operations cover every sequence): admit none meanwhile, wait until no generation
        runs, then :meth:`_own_context`; the context is this caller's until the block ends."""
        with self._changed:
            while self._held:
                self._changed.wait()
            self._held = True
        try:
            while True:
                if self._lock.acquire(blocking=False):
                    self._take_back()
                    with self._changed:
                        self._supersede()
                    if not self.active():
                        break
                    self._lock.release()
                with self._changed:
                    self._changed.wait(timeout=0.01)
            try:
                self._own_context()
                yield
            finally:
                self._lock.release()
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()
