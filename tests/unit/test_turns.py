"""The engine's lock protocol (plookup.engine.turns) without a model: whoever holds the context does
the queued bookkeeping first, a step never runs beside another, and exclusive waits for the running
generations, admits none meanwhile and hands out afterwards."""

from __future__ import annotations

import threading
import time

from plookup.engine.turns import Turns


class Jobs(Turns):
    """Turns whose "generations" are names: handed out from ``_waiting``, taken back from ``_given_back``."""

    def __init__(self, running=()):
        super().__init__()
        self.running = set(running)
        self.log = []

    def _take_back(self):
        while True:
            with self._changed:
                if not self._given_back:
                    return
                job = self._given_back.popleft()
            self.running.discard(job)
            self.log.append(("take back", job))

    def _hand_out(self):
        while True:
            with self._changed:
                if not self._waiting or self._held:
                    return
                job = self._waiting.popleft()
            self.running.add(job)
            self.log.append(("hand out", job))

    def active(self):
        return len(self.running)

    def _own_context(self):
        self.log.append(("own", tuple(sorted(self.running))))


def until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_whoever_holds_the_context_takes_back_then_hands_out_then_works():
    jobs = Jobs(running={"a"})
    jobs._given_back.append("a")
    jobs._waiting.append("b")
    assert jobs._run(lambda: jobs.log.append(("work",)))
    assert jobs.log == [("take back", "a"), ("hand out", "b"), ("work",)]
    assert jobs.running == {"b"}


def test_a_thread_finding_the_context_taken_does_not_wait_for_it():
    jobs = Jobs()
    holding, leave = threading.Event(), threading.Event()

    def hold():
        holding.set()
        leave.wait(10)

    holder = threading.Thread(target=jobs._run, args=(hold,))
    holder.start()
    assert holding.wait(10)
    ran = []
    assert not jobs._run(lambda: ran.append(1))  # at once, and nothing ran
    assert not ran
    leave.set()
    holder.join(10)
    assert jobs._run(lambda: ran.append(1)) and ran == [1]


def test_consumers_step_in_turn_until_each_has_what_it_waits_for():
    jobs = Jobs()
    count, inside, overlaps = [0], [0], []

    def step():
        inside[0] += 1
        if inside[0] > 1:
            overlaps.append(count[0])
        time.sleep(0.001)
        count[0] += 1
        inside[0] -= 1

    targets = [3, 7, 12, 20]
    threads = [threading.Thread(target=jobs._wait, args=(lambda t=t: count[0] >= t, step)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert count[0] >= max(targets) and not overlaps


def test_exclusive_waits_for_the_running_admits_none_and_hands_out_after():
    jobs = Jobs(running={"a"})
    inside, leave = threading.Event(), threading.Event()

    def owner():
        with jobs.exclusive():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=owner)
    thread.start()
    until(lambda: jobs._held)
    jobs._waiting.append("b")
    jobs._wait_for(lambda: None)  # bookkeeping while held: "b" waits
    assert "b" not in jobs.running and not inside.is_set()  # "a" still runs
    with jobs._changed:
        jobs._given_back.append("a")  # its consumer is done: the waiting owner takes it back
    assert inside.wait(10)
    assert ("own", ()) in jobs.log and jobs.running == set()
    assert not jobs._run(lambda: None)  # the context is the owner's
    leave.set()
    thread.join(10)
    jobs._wait_for(lambda: None)
    assert jobs.running == {"b"} and not jobs._held
