"""`python -m benchmarks.editors --editor session`: a user typing functions into real files in Vim
with llama.vim, live against each server: the requests llama.vim sends when it sends them, and the
time from a key to the suggestion shown there.

**The port.** llama.vim's FIM code (ggml-org/llama.vim autoload/llama.vim at a1c8e6e, its default
g:llama_config), function by function, run as Vim runs it (:class:`Vim` on a :class:`Loop`: the
autocommands on the user's keys, Vim's timers, the curl jobs' callbacks):

- ``s:on_move`` on CursorMoved/CursorMovedI (hide the suggestion; in insert mode show the cache's
  for the cursor, ``s:fim_try_hint``, and send the speculative request after it), then
  ``llama#fim(-1, -1, ...)`` on CursorMovedI.
- ``llama#fim`` (:meth:`Vim.fim`): **one request in flight**: while a FIM job runs, a call sets a
  100 ms timer to call again (the newest call replaces the older timer), so a key's request waits
  behind the speculative one still running; then no request where one of its four hashes is
  cached; the chunk around the cursor that evicts ring chunks more than 0.5 similar to it; the
  ``/infill`` body (``n_predict`` 128, ``top_k`` 40, ``top_p`` 0.90, samplers ``top_k, top_p,
  infill`` and no temperature, ``t_max_predict_ms`` 250 without ``prev``, 1000 with it); the two
  chunks it picks when the cursor moved more than 32 lines since the last pick.
- ``s:fim_on_response`` then ``s:fim_on_exit`` (:meth:`Vim.on_response`): the answer cached under
  the request's hashes, shown at the cursor *as it is then* if nothing acceptable is shown (a stale
  answer is shown only where the cache lookup matches the cursor's context: the same place, or
  up to 128 typed characters the answer foresaw), then the job slot freed.
- ``s:fim_ctx_local``, the cache (250 keys, LRU), ``s:fim_render``, ``llama#fim_accept('full')``
  (Tab) as before; the ring (:class:`Ring`): ``s:pick_chunk`` on BufEnter (a 100 ms timer), BufLeave,
  BufWritePost (not from a modified buffer), TextYankPost and llama#fim's picks; ``s:ring_update``
  every 1000 ms from llama#enable, in normal mode or after 3 s without a move in insert mode: the
  oldest queued chunk into the ring and the ``n_predict: 0`` warm-up request, a job of its own
  (not the FIM job: it does not block a FIM request in Vim, but it holds the server's one slot).
- Vim's ``rand()`` (xoshiro128**, :func:`vim_rand`), seeded as ``test_srand_seed`` seeds it.

``benchmarks/editors/tests/test_llama_vim_conformance.py`` holds the port to the real plugin: the
requests the real llama.vim sent in a real Vim (``tests/data/llama_vim/record.py``: a scripted
scenario against a fake server) are the port's on the same scenario, every field and in order.

**The bodies** are llama.vim's (``sampling`` None: the conformance test's) with the bench's
additions: ``"sampled"`` (the default column) adds a ``seed`` (the session's, so a system's
sampled answers repeat) and asks for the fields the bench reads (``timings/draft_n`` and the
like; the warm-up's too); ``"greedy"`` (the second column) also puts a temperature of 0 after its
samplers.

**The user** (:class:`Typist`, :func:`make_plan`). Release files of two packages
(:mod:`plookup.app.bench.releases`); in each, functions of 4-10 lines, each a task (the first
``tasks`` of them are typed): the user reads another file of the package (``:edit``, a jump,
sometimes a yank of 3-10 lines), opens the task's file with the function cut out, goes to the line
above it, ``o``, and types the function back: a character every KEY_MS (120-280 ms: 60 words a
minute), Enter with the next line's indentation at once (as autoindent would put it; the first
line's indentation too). At each line's start the user waits for a suggestion, up to PATIENCE_MS
(5 s: answers on this project's 2 cores take seconds); REACTION_MS (400 ms) after a suggestion is
shown, it presses Tab if the suggestion writes what it was going to type, else types on. Within a
line the user never waits for a server: keys keep coming while a request runs (llama.vim's
answers to keys typed since are cached, and shown only where they fit the cursor). Then Esc, ``:w``.
Every delay is drawn from the seed and the user's place in the function (not from what happened
before), so two systems' users type alike wherever their texts agree.

**Comparable across systems.** Sampled answers differ between systems, so no system's request
sequence can stand for another's: each system drives its own session, live, with the same seed
(the same plan, the same Vim ``rand()``, the same user's delays, the same sampling seed in every
body). Where suggestions differ, what the user accepts and so the requests differ: the record
keeps each run's requests and positions, and the table the suggestions accepted.

**The figure** is the time to a *shown* suggestion: at every cursor position the user's key makes
in insert mode, from that key to the suggestion an answer shows there (whichever request's answer
it is: the position's own, or one that foresaw the typed characters), median and p90 a run,
counted where one is shown before the user moves on; positions the cache shows at once and
positions left without a suggestion are counted beside it, and so are the line starts where the
user waits: how many showed a suggestion before the user typed on, and the time to it there
(PATIENCE_MS where none did), since the figure above counts only the positions a suggestion was
shown at, and a server that shows none at a line start is not the faster for it. Also per run: the
requests by kind, how long a first request waited in Vim for the job in flight, the FIM requests
sent while a warm-up held the server. llama.vim has no client-side timeout (curl runs until the server answers) and
llama-server does not implement ``t_max_prompt_ms``; ``t_max_predict_ms`` ends the generation at
the first line end after it.

The earlier replay (the driver system's requests sent one after another to each server) is gone:
it had the user wait for every answer, which llama.vim's user does not.

Positions are in characters where Vim counts bytes (``col('.')``, ``strpart``): the same for the
ASCII source files used here.
"""

from __future__ import annotations

import hashlib
import heapq
import queue
import random
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Generator, Optional, Sequence

from plookup.app.tables import grid

from .llama_vim import (
    N_PREFIX,
    N_SUFFIX,
    RESPONSE_FIELDS,
    RING_CHUNK_SIZE,
    SWEEP_SYSTEM,
    SYSTEMS,
    Server,
    functions,
    infill_body,
    release_files,
    system,
)

# g:llama_config's defaults, and llama.vim's constants
T_MAX_PREDICT_MS = 1000  # a speculative request's budget (g:llama_config.t_max_predict_ms)
T_FIRST_PREDICT_MS = 250  # llama#fim: a request without `prev` ("the first request is quick")
MAX_LINE_SUFFIX = 8
MAX_CACHE_KEYS = 250
RING_N_CHUNKS = 16
RING_SCOPE = 1024
RING_QUEUE = 16  # s:pick_chunk: "TODO: become parameter ?"
RING_UPDATE_MS = 1000  # s:ring_update's timer
RING_IDLE_MS = 3000  # ... which in insert mode waits for the cursor to rest this long
FIM_RETRY_MS = 100  # llama#fim's timer while a request is in flight
BUF_ENTER_MS = 100  # BufEnter's pick_chunk timer
LOOKBACK = 128  # s:fim_try_hint: characters behind the cursor
PICK_DISTANCE = 32  # llama#fim picks chunks when the cursor moved more lines than this
EVICT_SIMILAR, DROP_SIMILAR = 0.5, 0.9  # llama#fim's and s:pick_chunk's similarity bounds
WARM_UP_FIELDS = ["timings/prompt_n", "timings/prompt_ms", "tokens_cached"]  # what the bench reads of a warm-up
SAMPLINGS = ("sampled", "greedy")  # the bench's columns: llama.vim's samplers (seeded), and greedy

# The user model
KEY_MS = (120, 280)
PATIENCE_MS = 5000  # at a line's start the user waits this long for a suggestion (this CPU's answers take seconds)
# The waits' curve: how many line starts showed a suggestion within each of these seconds. Every run
# has the same line starts, so the curves of two systems compare at every point; the time to a shown
# suggestion counts only where one was shown, and a system that shows more (slowish) ones reads slower.
WITHIN_S = (1, 2, 3, 4, 5)
READ_MS = (1500, 3000)
REACTION_MS = 400
DEFAULT_TASKS, DEFAULT_REPEATS = 3, 3
FUNCTION_LINES = (4, 10)
MIN_LINES_BEFORE = 120  # a function this far into its file: the 256-line window and the ring's picks at work
MIN_LINES_AFTER = 70
SESSION_PACKAGES, TASKS_PER_PACKAGE = 2, 4
VISITS = 1  # other files read before each function
YANK_LINES, YANK_SHARE = (3, 10), 0.5
SESSION_N_CTX = 8192

# llama.vim's recommended llama-server flags (its README), and the same for `plookup serve`
SERVER_FLAGS = "-ub 1024 -b 1024 --cache-reuse 256"
SESSION_SYSTEMS = {
    "llama-server": (f"llama-server {SERVER_FLAGS}", {}),
    "llama-server ngram-mod": (f"llama-server {SERVER_FLAGS} --spec-type ngram-mod", {}),
    "plookup": (f"plookup serve {SERVER_FLAGS}", {}),
    "plookup plain": (f"plookup serve {SERVER_FLAGS}", {"speculative": {"n_max": 0}}),
    "plookup --no-memory": (f"plookup serve --no-memory {SERVER_FLAGS}", {}),
}
SESSION_DEFAULT_SYSTEMS = ("llama-server", "plookup")


def session_system(name: str) -> tuple[str, dict]:
    """(server, extra request fields) of a session's system: one of SESSION_SYSTEMS, or a point of a
    sweep, `llama-server SPEC N` (:func:`system`), on llama.vim's flags as the others."""
    if name in SESSION_SYSTEMS:
        return SESSION_SYSTEMS[name]
    server, extra = system(name)
    if not server.startswith("llama-server --spec-type "):
        raise ValueError(f"--editor session has no system {name!r}: choose from {', '.join(SESSION_SYSTEMS)}, "
                         f"or {SWEEP_SYSTEM}")
    return f"llama-server {SERVER_FLAGS}{server[len('llama-server'):]}", extra


# -- Vim's side: a buffer


def blank(line: str) -> bool:
    """Vim's ``line =~ '^\\s*$'``."""
    return re.fullmatch(r"[ \t]*", line) is not None


def indent_of(line: str) -> int:
    """``strlen(matchstr(line, '^\\s*'))``."""
    return len(line) - len(line.lstrip(" \t"))


@dataclass
class Buffer:
    """A file open in Vim: its lines, the cursor (line 1-based, column 0-based: ``col('.') - 1``)."""

    name: str
    lines: list
    y: int = 1
    x: int = 0
    modified: bool = False

    @property
    def last(self) -> int:  # line('$')
        return len(self.lines)

    def line(self, n: int) -> str:
        """``getline(n)``: "" outside the buffer."""
        return self.lines[n - 1] if 1 <= n <= len(self.lines) else ""

    def getlines(self, first: int, last: int) -> list:
        """``getline(first, last)``: the lines between, both in, clipped to the buffer."""
        first, last = max(first, 1), min(last, len(self.lines))
        return self.lines[first - 1 : last] if first <= last else []

    def around_cursor(self) -> list:
        """The text the BufEnter/BufLeave/BufWritePost autocommands pick a chunk of."""
        half = RING_CHUNK_SIZE // 2
        return self.getlines(max(1, self.y - half), min(self.y + half, self.last))


# -- llama.vim's functions


def fim_ctx_local(buf: Buffer, pos_x: int, pos_y: int, prev: Sequence[str], indent_last: int) -> dict:
    """s:fim_ctx_local: the local context at (pos_x, pos_y); with `prev` (a shown suggestion's
    lines), the context as if it were accepted there."""
    if not prev:
        line_cur = buf.line(pos_y)
        line_cur_prefix, line_cur_suffix = line_cur[:pos_x], line_cur[pos_x:]
        lines_prefix = buf.getlines(max(1, pos_y - N_PREFIX), pos_y - 1)
        lines_suffix = buf.getlines(pos_y + 1, min(buf.last, pos_y + N_SUFFIX))
        if blank(line_cur):  # a line of whitespace: from its start
            indent, line_cur_prefix, line_cur_suffix = 0, "", ""
        else:
            indent = indent_of(line_cur)
    else:
        line_cur = buf.line(pos_y) + prev[0] if len(prev) == 1 else prev[-1]
        line_cur_prefix, line_cur_suffix = line_cur, ""
        lines_prefix = buf.getlines(max(1, pos_y - N_PREFIX + len(prev) - 1), pos_y - 1)
        if len(prev) > 1:
            lines_prefix = lines_prefix + [buf.line(pos_y) + prev[0], *prev[1:-1]]
        lines_suffix = buf.getlines(pos_y + 1, min(buf.last, pos_y + N_SUFFIX))
        indent = indent_last
    return {
        "prefix": "\n".join(lines_prefix) + "\n",
        "middle": line_cur_prefix,
        "suffix": line_cur_suffix + "\n" + "\n".join(lines_suffix) + "\n",
        "indent": indent, "line_cur": line_cur, "line_cur_prefix": line_cur_prefix, "line_cur_suffix": line_cur_suffix,
    }


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_hashes(prefix: str, middle: str, suffix: str) -> list:
    """llama#fim's hashes: the context's, and the context's less its first 1, 2, 3 prefix lines
    (a completion found again after scrolling down)."""
    hashes = [sha256(prefix + middle + "Î" + suffix)]
    trimmed = prefix
    for _ in range(3):
        trimmed = re.sub(r"^[^\n]*\n", "", trimmed, count=1)
        if not trimmed:
            break
        hashes.append(sha256(trimmed + middle + "Î" + suffix))
    return hashes


def chunk_sim(c0: Sequence[str], c1: Sequence[str]) -> float:
    """s:chunk_sim: 2 x the words of c1 found in c0's set of words, over both counts of words."""
    def words(chunk):
        return [w for w in re.split(r"[^0-9A-Za-z_]+", "\n".join(chunk)) if w]

    tokens0, tokens1 = words(c0), words(c1)
    if not tokens0 and not tokens1:
        return 1.0
    set0 = set(tokens0)
    return 2.0 * sum(1 for t in tokens1 if t in set0) / (len(tokens0) + len(tokens1))


def take_chunk(text: Sequence[str], rand: Callable[[int, int], int]) -> list:
    """A chunk of at most RING_CHUNK_SIZE/2 + 1 lines of `text`, at a random line (Vim's inclusive
    ``text[l0:l1]``), or all of a short text (s:pick_chunk, and llama#fim's chunk around the cursor)."""
    half = RING_CHUNK_SIZE // 2
    l0 = rand(0, max(0, len(text) - half))
    l1 = min(l0 + half, len(text))
    return list(text[l0 : l1 + 1])


@dataclass
class Chunk:
    data: list  # its lines
    text: str  # joined, a newline after each
    time: int  # ms on the loop's clock
    filename: str


class Ring:
    """llama.vim's ring buffer of chunks: `chunks` go out as ``input_extra`` (oldest first),
    `queued` wait for the timer."""

    def __init__(self, n_chunks: int = RING_N_CHUNKS):
        self.n_chunks = n_chunks
        self.chunks: list[Chunk] = []
        self.queued: list[Chunk] = []
        self.n_evict = 0

    def pick(self, text: Sequence[str], filename: str, when: int, do_evict: bool,
             rand: Callable[[int, int], int]) -> bool:
        """s:pick_chunk after its buffer check: whether a chunk was queued."""
        if self.n_chunks <= 0 or len(text) < 3:
            return False
        chunk = list(text) if len(text) + 1 < RING_CHUNK_SIZE else take_chunk(text, rand)
        if any(c.data == chunk for c in self.chunks + self.queued):
            return False
        for holder in (self.queued, self.chunks):
            for i in range(len(holder) - 1, -1, -1):
                if chunk_sim(holder[i].data, chunk) > DROP_SIMILAR:
                    if not do_evict:
                        return False
                    del holder[i]
                    self.n_evict += 1
        if len(self.queued) == RING_QUEUE:
            del self.queued[0]
        self.queued.append(Chunk(chunk, "\n".join(chunk) + "\n", when, filename))
        return True

    def update(self) -> bool:
        """s:ring_update's move: the oldest queued chunk into the ring (its oldest out when full)."""
        if not self.queued:
            return False
        if len(self.chunks) == self.n_chunks:
            del self.chunks[0]
        self.chunks.append(self.queued.pop(0))
        return True

    def extra(self) -> list:
        """s:ring_get_extra."""
        return [{"text": c.text, "time": [c.time // 1000, c.time % 1000 * 1000], "filename": c.filename}
                for c in self.chunks]  # (reltime()'s [seconds, microseconds]; servers ignore it)


def fim_body(ctx: dict, extra: list, t_max_predict_ms: int, sampling: Optional[str] = None, seed: int = 0) -> dict:
    """llama#fim's request as llama.vim sends it (`sampling` None), or the bench's: ``"sampled"``
    adds a ``seed`` and the fields the bench reads, ``"greedy"`` also a temperature of 0 after its
    samplers (see the module's docstring). `model` is there because llama.vim tests
    ``len("g:llama_config.model_fim")``, the name's length, and sends its empty default."""
    body = infill_body(ctx["prefix"], ctx["suffix"], extra, ctx["middle"], ctx["indent"], t_max_predict_ms)
    body = {**body, "model": ""}
    if sampling != "greedy":  # llama.vim's samplers, no temperature sampler
        del body["temperature"]
        body["samplers"] = [s for s in body["samplers"] if s != "temperature"]
    if sampling is None:
        body["response_fields"] = list(RESPONSE_FIELDS)
    else:
        body["seed"] = seed
    return body


def warm_up_body(extra: list, sampling: Optional[str] = None) -> dict:
    """s:ring_update's request: the ring's chunks, nothing to predict."""
    fields = [""] if sampling is None else [""] + WARM_UP_FIELDS
    return {
        "id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
        "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1, "response_fields": fields, "model": "",
    }


def render(buf: Buffer, pos_x: int, pos_y: int, content_text: str) -> dict:
    """s:fim_render's reading of an answer at (pos_x, pos_y): the suggestion's lines (blanked
    where they repeat the text after the cursor), whether it can be accepted, and the line it
    goes on (fim_data)."""
    content = content_text.split("\n")
    while content and content[-1] == "":
        content.pop()
    can_accept = True
    if not content:
        content, can_accept = [""], False
    line_cur = buf.line(pos_y)
    if blank(line_cur):  # trim as much whitespace from the suggestion as the line has
        lead = min(indent_of(content[0]), len(line_cur))
        line_cur, content[0] = content[0][:lead], content[0][lead:]
    line_cur_prefix, line_cur_suffix = line_cur[:pos_x], line_cur[pos_x:]
    if len(content) == 1 and content[0] == "":
        content = [""]
    if len(content) > 1 and content[0] == "" and content[1:] == buf.getlines(pos_y + 1, pos_y + len(content) - 1):
        content = [""]
    if len(content) == 1 and content[0] == line_cur_suffix:
        content = [""]
    cmp_y = pos_y + 1
    while cmp_y < buf.last and blank(buf.line(cmp_y)):
        cmp_y += 1
    if line_cur_prefix + content[0] == buf.line(cmp_y):
        if len(content) == 1:
            content = [""]
        if len(content) == 2:
            following = buf.line(cmp_y + 1)
            if content[-1] == (following[: len(content[-1])] if content[-1] else following):  # Vim's s[:-1]: all of s
                content = [""]
        if len(content) > 2 and "\n".join(content[1:]) == "\n".join(buf.getlines(cmp_y + 1, cmp_y + len(content) - 1)):
            content = [""]
    content[-1] += line_cur_suffix
    if blank("\n".join(content)):
        can_accept = False
    return {"pos_x": pos_x, "pos_y": pos_y, "line_cur": line_cur, "can_accept": can_accept, "content": content}


def accepted_lines(fim_data: dict) -> Optional[list]:
    """llama#fim_accept('full'): the lines that replace the suggestion's line, None where it cannot
    be accepted (Vim's ``line_cur[:(pos_x - 1)]`` is all of the line at column 0)."""
    if not fim_data.get("can_accept") or not fim_data.get("content"):
        return None
    pos_x, line_cur, content = fim_data["pos_x"], fim_data["line_cur"], fim_data["content"]
    head = line_cur[:pos_x] if pos_x > 0 else line_cur
    return [head + content[0], *content[1:]]




def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-quantile (0..1) by linear interpolation between the sorted values (numpy's default)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)



def vim_rand(seed: int) -> Callable[[int, int], int]:
    """s:rand(i0, i1) over Vim's rand(): xoshiro128** seeded by splitmix32 from `seed` (Vim's
    ``test_srand_seed(seed)``; unseeded, Vim draws the seed from /dev/urandom)."""
    mask = 0xFFFFFFFF
    x = [seed & mask]

    def splitmix32() -> int:
        x[0] = (x[0] + 0x9E3779B9) & mask
        z = x[0]
        z = ((z ^ (z >> 16)) * 0x85EBCA6B) & mask
        z = ((z ^ (z >> 13)) * 0xC2B2AE35) & mask
        return z ^ (z >> 16)

    state = [splitmix32() for _ in range(4)]

    def rotl(v: int, k: int) -> int:
        return ((v << k) | (v >> (32 - k))) & mask

    def rand() -> int:
        a, b, c, d = state
        result = (rotl((b * 5) & mask, 7) * 9) & mask
        t = (b << 9) & mask
        c ^= a
        d ^= b
        b ^= c
        a ^= d
        c ^= t
        d = rotl(d, 11)
        state[:] = [a, b, c, d]
        return result

    return lambda i0, i1: i0 + rand() % (i1 - i0 + 1)


# -- Vim's clock and llama.vim's curl jobs


class Loop:
    """Vim's main loop as the port needs it: timers and job callbacks, run in time order between
    the user's keys (ms). Virtual (the tests': time jumps to the next event) or real time (the
    bench's: the wall clock since the start, answers taken from the server threads as they come)."""

    def __init__(self, realtime: bool = False):
        self.realtime = realtime
        self._heap: list = []
        self._seq = 0
        self._cancelled: set = set()
        self._t0 = time.perf_counter()
        self._now = 0.0
        self._inbox: queue.Queue = queue.Queue()

    @property
    def now(self) -> float:
        return (time.perf_counter() - self._t0) * 1000 if self.realtime else self._now

    def at(self, t: float, fn: Callable[[], None]) -> int:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))
        return self._seq

    def later(self, ms: float, fn: Callable[[], None]) -> int:
        """timer_start(ms, fn)"""
        return self.at(self.now + ms, fn)

    def cancel(self, timer: Optional[int]) -> None:
        """timer_stop()"""
        if timer is not None:
            self._cancelled.add(timer)

    def deliver(self, fn: Callable[[], None]) -> None:
        """From another thread: run `fn` in the loop as soon as it can (a job's output)."""
        self._inbox.put(fn)

    def _next_timer(self) -> float:
        while self._heap and self._heap[0][1] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._heap)[1])
        return self._heap[0][0] if self._heap else float("inf")

    def run_until(self, t: float) -> None:
        """Run every timer and callback due up to time `t` (in real time: until then)."""
        while True:
            due = self._next_timer()
            if self.realtime:
                wait = (min(due, t) - self.now) / 1000
                try:
                    fn = self._inbox.get(timeout=wait) if wait > 0 else self._inbox.get_nowait()
                    fn()
                    continue
                except queue.Empty:
                    pass
                if due <= t and due <= self.now:
                    heapq.heappop(self._heap)[2]()
                    continue
                if self.now >= t:
                    return
            else:
                if due > t:
                    self._now = max(self._now, t)
                    return
                _, _, fn = heapq.heappop(self._heap)
                self._now = max(self._now, due)
                fn()


class FakeSlot:
    """A server of one slot on the virtual clock: a request waits for the one before it, then
    takes `delay(body)` ms and answers `answer(body)` (the tests' server)."""

    def __init__(self, loop: Loop, answer: Callable[[dict], dict], delay: Callable[[dict], float]):
        self.loop, self.answer, self.delay = loop, answer, delay
        self.free = 0.0

    def post(self, body: dict, done: Callable[[dict], None]) -> None:
        self.free = max(self.loop.now, self.free) + self.delay(body)
        self.loop.at(self.free, lambda: done(self.answer(body)))


class HttpJobs:
    """llama.vim's curl jobs against a started server, in real time: each request on a thread of
    its own, as each curl is a process of its own (the server queues them on its one slot)."""

    def __init__(self, loop: Loop, server, extra: Optional[dict] = None):
        self.loop, self.server, self.extra = loop, server, extra or {}

    def post(self, body: dict, done: Callable[[dict], None]) -> None:
        def work() -> None:
            try:
                answer, _ = self.server.post("/infill", {**body, **self.extra})
            except Exception as error:  # (curl's failure: llama.vim shows nothing)
                answer = {"error": str(error)}
            self.loop.deliver(lambda: done(answer))

        threading.Thread(target=work, daemon=True).start()


# -- llama.vim in a Vim


@dataclass
class Request:
    kind: str  # "first" (llama#fim without prev), "speculative" (with prev), "warm-up" (s:ring_update)
    body: dict
    t_sent: float = 0.0  # ms
    origin: Optional[float] = None  # the user's key that asked for it (a FIM request), ms
    hashes: tuple = ()
    prev: tuple = ()
    t_answer: Optional[float] = None
    answer: dict = field(default_factory=dict)


class Vim:
    """One Vim with llama.vim (its defaults): the buffers, the mode, the cursor, and the plugin's
    state (the ring, the cache, the shown suggestion, the job in flight and the retry timer),
    its functions run on `loop` as Vim runs them (autocommands on the user's keys, timers, job
    callbacks). `jobs` takes the requests; `files` is the disk (name -> text)."""

    def __init__(self, loop: Loop, jobs, files: dict, rand: Callable[[int, int], int],
                 sampling: Optional[str] = None, seed: int = 0):
        self.loop, self.jobs, self.files, self.rand = loop, jobs, files, rand
        self.sampling, self.seed = sampling, seed
        self.ring = Ring()
        self.cache: OrderedDict[str, dict] = OrderedDict()
        self.hint_shown = False
        self.fim_data: dict = {}
        self.indent_last = -1
        self.pos_y_pick = -9999
        self.t_last_move = 0.0
        self.timer_fim: Optional[int] = None
        self.job_fim: Optional[Request] = None
        self.buffers: dict[str, Buffer] = {}
        self.buffer: Optional[Buffer] = None
        self.mode = "n"
        self.sent: list[Request] = []
        # the user's cursor positions in insert mode: [key time, buffer, y, x, shown at, by, the
        # user waits there (a line's start: the typist says)]
        self.positions: list = []
        self.on_shown: Optional[Callable[[], None]] = None  # (the simulated user looks)

    # the cache (s:cache_insert, s:cache_get)

    def cache_insert(self, key: str, value: dict) -> None:
        if len(self.cache) > MAX_CACHE_KEYS - 1:  # (llama.vim evicts even when the key is there)
            self.cache.popitem(last=False)
        self.cache[key] = value
        self.cache.move_to_end(key)

    def cache_get(self, key: str) -> Optional[dict]:
        if key not in self.cache:
            return None
        self.cache.move_to_end(key)
        return self.cache[key]

    # jobs

    def send(self, request: Request, done: Optional[Callable[[dict], None]] = None) -> None:
        request.t_sent = self.loop.now
        self.sent.append(request)

        def answered(answer: dict) -> None:
            request.t_answer, request.answer = self.loop.now, answer
            if done is not None:
                done(answer)

        self.jobs.post(request.body, answered)

    # the ring

    def enable(self) -> None:
        """llama#enable: the ring's timer starts (and ticks at once)."""
        self.ring_update()

    def pick_chunk(self, text: Sequence[str], no_mod: bool, do_evict: bool) -> bool:
        buf = self.buffer
        if buf is None or (no_mod and (buf.modified or buf.name not in self.files)):
            return False
        return self.ring.pick(text, buf.name, int(self.loop.now), do_evict, self.rand)

    def ring_update(self) -> None:
        """s:ring_update, every RING_UPDATE_MS: in normal mode or after RING_IDLE_MS without a move,
        the oldest queued chunk into the ring, and the warm-up request (no callback)."""
        self.loop.later(RING_UPDATE_MS, self.ring_update)
        if self.mode != "n" and self.loop.now - self.t_last_move < RING_IDLE_MS:
            return
        if self.ring.update():
            self.send(Request("warm-up", warm_up_body(self.ring.extra(), self.sampling)))

    # FIM

    def hide(self) -> None:
        """llama#fim_hide"""
        self.hint_shown = False

    def on_move(self) -> None:
        """s:on_move (CursorMoved, CursorMovedI)"""
        self.t_last_move = self.loop.now
        self.hide()
        self.try_hint(self.buffer.x, self.buffer.y)

    def fim(self, pos_x: int, pos_y: int, is_auto: bool, prev: Sequence[str], use_cache: bool,
            origin: Optional[float] = None) -> None:
        """llama#fim: with a request in flight, again in FIM_RETRY_MS (the newest call only)."""
        buf = self.buffer
        if self.job_fim is not None:
            self.loop.cancel(self.timer_fim)
            self.timer_fim = self.loop.later(FIM_RETRY_MS, lambda: self.fim(pos_x, pos_y, True, prev, use_cache, origin))
            return
        x = buf.x if pos_x < 0 else pos_x
        y = buf.y if pos_y < 0 else pos_y
        ctx = fim_ctx_local(buf, x, y, prev, self.indent_last)
        if is_auto and len(ctx["line_cur_suffix"]) > MAX_LINE_SUFFIX:
            return
        t_max_predict_ms = T_MAX_PREDICT_MS if prev else T_FIRST_PREDICT_MS
        hashes = context_hashes(ctx["prefix"], ctx["middle"], ctx["suffix"])
        if use_cache and any(self.cache_get(key) is not None for key in hashes):
            return
        self.indent_last = ctx["indent"]
        # a chunk around the cursor: ring chunks like it would make the model repeat the text there
        half = RING_CHUNK_SIZE // 2
        near = take_chunk(buf.getlines(max(1, buf.y - half), min(buf.y + half, buf.last)), self.rand)
        for i in range(len(self.ring.chunks) - 1, -1, -1):
            if chunk_sim(self.ring.chunks[i].data, near) > EVICT_SIMILAR:
                del self.ring.chunks[i]
                self.ring.n_evict += 1
        body = fim_body(ctx, self.ring.extra(), t_max_predict_ms, self.sampling, self.seed)
        request = Request("speculative" if prev else "first", body, origin=origin, hashes=tuple(hashes),
                          prev=tuple(prev))
        self.job_fim = request
        self.send(request, lambda answer: self.on_response(request, answer))
        if is_auto and abs(y - self.pos_y_pick) > PICK_DISTANCE:
            last = buf.last
            self.pick_chunk(buf.getlines(max(1, y - RING_SCOPE), max(1, y - N_PREFIX)), False, False)
            self.pick_chunk(buf.getlines(min(last, y + N_SUFFIX), min(last, y + N_SUFFIX + RING_CHUNK_SIZE)),
                            False, False)
            self.pos_y_pick = y

    def on_response(self, request: Request, answer: dict) -> None:
        """s:fim_on_exit (no job in flight), then s:fim_on_response: cache the answer under every
        hash; show it where nothing acceptable is shown. (In that order: in the recording the
        speculative request leaves ~20 ms after the answer, not a 100 ms retry later: curl has
        exited when Vim hands over its output, which has no line end.)"""
        self.job_fim = None
        if isinstance(answer.get("content"), str):
            for key in request.hashes:
                self.cache_insert(key, {"content": answer["content"]})
            if not self.hint_shown or not self.fim_data.get("can_accept"):
                self.try_hint(self.buffer.x, self.buffer.y, request)

    def lookup(self, pos_x: int, pos_y: int) -> Optional[dict]:
        """s:fim_try_hint's search of the cache: the context's answer, else one cached up to 128
        characters back that what was typed since matches (its rest)."""
        ctx = fim_ctx_local(self.buffer, pos_x, pos_y, [], self.indent_last)
        found = self.cache_get(sha256(ctx["prefix"] + ctx["middle"] + "Î" + ctx["suffix"]))
        if found is not None:
            return found
        typed, best = ctx["prefix"] + ctx["middle"], 0
        for i in range(LOOKBACK):
            removed = typed[-(1 + i):]
            cached = self.cache_get(sha256(typed[: max(0, len(typed) - (1 + i))] + "Î" + ctx["suffix"]))
            if cached is None or cached["content"][: i + 1] != removed:
                continue
            rest = cached["content"][i + 1:]
            if rest:
                if found is None:  # (llama.vim's `best` starts at 0 here: the next one found replaces it)
                    found = {"content": rest}
                elif len(rest) > best:
                    best, found = len(rest), {"content": rest}
        return found

    def try_hint(self, pos_x: int, pos_y: int, answered: Optional[Request] = None) -> None:
        """s:fim_try_hint (insert mode only): show the cache's suggestion, then the speculative
        request after it."""
        if self.mode != "i":
            return
        found = self.lookup(pos_x, pos_y)
        if found is None:
            return
        self.fim_data = render(self.buffer, pos_x, pos_y, found["content"])
        self.hint_shown = True
        if self.positions and self.positions[-1][4] is None:
            self.positions[-1][4:6] = [self.loop.now, answered.kind if answered is not None else "cache"]
        if self.on_shown is not None:
            self.on_shown()
        self.fim(pos_x, pos_y, True, self.fim_data["content"], True, origin=self.loop.now)

    # the keys (Vim's editing, and the autocommands llama.vim hooks)

    def _moved_insert(self) -> None:
        """CursorMovedI: s:on_move, then llama#fim for the cursor."""
        buf = self.buffer
        self.positions.append([self.loop.now, buf.name, buf.y, buf.x, None, None, False])
        self.on_move()
        self.fim(-1, -1, True, [], True, origin=self.loop.now)

    def open(self, name: str) -> None:
        """``:edit name``: BufLeave's chunk, BufEnter's (a timer of BUF_ENTER_MS), CursorMoved."""
        if self.buffer is not None:
            self.pick_chunk(self.buffer.around_cursor(), True, True)
        if name not in self.buffers:  # (a buffer opened before keeps its cursor)
            self.buffers[name] = Buffer(name, self.files[name].split("\n")[:-1] if self.files[name].endswith("\n")
                                        else self.files[name].split("\n"))
        self.buffer = self.buffers[name]
        self.loop.later(BUF_ENTER_MS, lambda: self.pick_chunk(self.buffer.around_cursor(), True, True))
        self.on_move()

    def goto(self, line: int) -> None:
        """``{line}G``: to the line's first non-blank ('startofline')."""
        buf = self.buffer
        buf.y = min(max(1, line), buf.last)
        text = buf.line(buf.y)
        buf.x = indent_of(text) if text.strip() else max(0, len(text) - 1)
        self.on_move()

    def yank(self, n: int) -> None:
        """``{n}yy``: TextYankPost's chunk of the lines."""
        buf = self.buffer
        self.pick_chunk(buf.getlines(buf.y, buf.y + n - 1), False, True)

    def open_below(self) -> None:
        """``o``: a new line below, insert mode (no autoindent)."""
        buf = self.buffer
        buf.lines.insert(buf.y, "")
        buf.y, buf.x, buf.modified, self.mode = buf.y + 1, 0, True, "i"
        self._moved_insert()

    def type(self, text: str) -> None:
        """Characters typed in insert mode at once (one key, or what autoindent puts)."""
        buf = self.buffer
        line = buf.line(buf.y)
        buf.lines[buf.y - 1] = line[: buf.x] + text + line[buf.x:]
        buf.x += len(text)
        buf.modified = True
        self._moved_insert()

    def enter(self, indent: str = "") -> None:
        """Enter in insert mode; `indent`, the next line's indentation put at once (as autoindent would)."""
        buf = self.buffer
        line = buf.line(buf.y)
        buf.lines[buf.y - 1: buf.y] = [line[: buf.x], indent + line[buf.x:]]
        buf.y, buf.x, buf.modified = buf.y + 1, len(indent), True
        self._moved_insert()

    def esc(self) -> None:
        """Esc: InsertLeavePre hides the suggestion; normal mode, the cursor a column left (CursorMoved)."""
        self.hide()
        self.mode = "n"
        if self.buffer.x > 0:
            self.buffer.x -= 1
            self.on_move()

    def tab(self) -> bool:
        """Tab: with a suggestion shown, llama.vim's mapping (``<C-O>`` llama#fim_accept('full'):
        the lines, the cursor after them, then the moves Vim reports); else a tab typed.
        Whether a suggestion was accepted."""
        if not self.hint_shown:
            self.type("\t")
            return False
        buf, data = self.buffer, self.fim_data
        lines = accepted_lines(data)
        if lines is not None:
            y = data["pos_y"]
            buf.lines[y - 1: y] = lines
            content = data["content"]
            if len(content) == 1:
                buf.y, buf.x = y, data["pos_x"] + len(content[0])
            else:
                buf.y, buf.x = y + len(content) - 1, len(content[-1])
            buf.modified = True
        self.hide()
        self.mode = "n"  # (<C-O>: CursorMoved in Insert-normal mode, where llama.vim shows nothing)
        self.on_move()
        self.mode = "i"
        self._moved_insert()
        return lines is not None

    def write(self) -> None:
        """``:w``: BufWritePost's chunk around the cursor."""
        self.buffer.modified = False
        self.files[self.buffer.name] = "\n".join(self.buffer.lines) + "\n"
        self.pick_chunk(self.buffer.around_cursor(), True, True)


def play(vim: Vim, steps: Sequence[dict]) -> None:
    """Schedule a scripted scenario's steps (``{"t": ms, "action": [name, arg]}``, record.py's)
    on `vim`'s loop, llama.vim enabled at time 0."""
    vim.loop.at(0, vim.enable)
    actions = {"open": vim.open, "goto": vim.goto, "yank": vim.yank, "o": vim.open_below, "type": vim.type,
               "enter": vim.enter, "esc": vim.esc, "tab": vim.tab, "write": vim.write, "quit": lambda: None}
    for step in steps:
        name, *args = step["action"]
        vim.loop.at(step["t"], lambda f=actions[name], a=args: f(*a))


# -- the user



@dataclass(frozen=True)
class Visit:
    path: str
    line: int  # 1-based: where the user reads
    yank: int = 0  # lines yanked there


@dataclass(frozen=True)
class Task:
    package: str
    path: str
    first: int  # the function's lines [first, end), 0-based
    end: int
    visits: tuple = ()


def candidate_functions(files: dict) -> list:
    """(path, first, end) of the functions the user may type: FUNCTION_LINES long, three lines
    not blank, MIN_LINES_BEFORE lines into a file with MIN_LINES_AFTER after them."""
    found = []
    for path in sorted(files):
        lines = files[path].splitlines()
        for first, end in functions(files[path]):
            body = lines[first:end]
            if (FUNCTION_LINES[0] <= end - first <= FUNCTION_LINES[1] and first >= MIN_LINES_BEFORE
                    and len(lines) - end >= MIN_LINES_AFTER and sum(1 for line in body if line.strip()) >= 3
                    and body[0].strip() and "\t" not in "".join(body)):
                found.append((path, first, end))
    return found


def make_plan(packages: dict, seed: int, n_packages: int = SESSION_PACKAGES,
              tasks_per_package: int = TASKS_PER_PACKAGE) -> list:
    """The tasks, drawn with `seed`: `n_packages` packages, in each `tasks_per_package` functions
    of different files where it has them, each after VISITS visits of other files of the package."""
    rng = random.Random(seed)
    names = sorted(packages)
    plan = []
    for package in rng.sample(names, min(n_packages, len(names))):
        files = packages[package]
        spans = candidate_functions(files)
        rng.shuffle(spans)
        picked, paths = [], set()
        for span in spans:  # different files first, then any
            if span[0] not in paths and len(picked) < tasks_per_package:
                picked.append(span)
                paths.add(span[0])
        picked += [s for s in spans if s not in picked][: tasks_per_package - len(picked)]
        for index, (path, first, end) in enumerate(picked):
            others = [p for p in sorted(files) if p != path and len(files[p].splitlines()) >= 3]
            visits = []
            for _ in range(min(len(others), VISITS)):
                other = rng.choice(others)
                n_lines = len(files[other].splitlines())
                line = rng.randint(1, n_lines)
                yank = rng.randint(*YANK_LINES) if rng.random() < YANK_SHARE else 0
                visits.append(Visit(other, line, min(yank, n_lines - line + 1) if yank >= 3 else 0))
            plan.append(Task(package, path, first, end, tuple(visits)))
    return plan




def function_edit(files: dict, task: Task) -> tuple[str, str]:
    """The task's file as the user finds it (the function cut out) and the function's text."""
    lines = files[task.path].splitlines()
    return "\n".join(lines[: task.first] + lines[task.end:]) + "\n", "\n".join(lines[task.first: task.end])


def user_delay(seed: int, task: int, typed: int, bounds: tuple) -> float:
    """A delay of the user's, drawn from their place in the session (not from what came before, so
    that systems whose suggestions differ still get the same user wherever they type the same)."""
    return random.Random(f"user {seed} {task} {typed}").uniform(*bounds)


class Typist:
    """The simulated user (see the module's docstring) at `vim`: :meth:`start` on its loop, then
    `done` once the plan is written."""

    def __init__(self, vim: Vim, plan: Sequence[Task], packages: dict, seed: int):
        self.vim, self.plan, self.packages, self.seed = vim, list(plan), packages, seed
        self.done = False
        self.accepted = 0  # suggestions accepted (Tab)
        self.keys = 0  # characters, Enters and Tabs sent
        self.typed = 0  # characters typed (not accepted)
        self.completed = 0
        self.typing: Optional[list] = None  # [task, the function's text, characters in the buffer]
        self.waiting = False  # at a line's start, for a suggestion
        self.timer: Optional[int] = None
        self.steps = self.script()
        vim.on_shown = self.look

    def start(self) -> None:
        self.step()

    def step(self) -> None:
        self.waiting = False
        try:
            delay = next(self.steps)
        except StopIteration:
            self.done = True
            return
        self.timer = self.vim.loop.later(delay, self.step)

    def look(self) -> None:
        """A suggestion was shown: read it, REACTION_MS."""
        if self.typing is not None:
            self.vim.loop.later(REACTION_MS, self.consider)

    def consider(self) -> None:
        """Accept the suggestion shown (Tab) where it writes what the user was going to type."""
        vim = self.vim
        if self.typing is None or not vim.hint_shown:
            return
        number, text, typed = self.typing
        lines = accepted_lines(vim.fim_data)
        if lines is None or vim.fim_data["pos_y"] != vim.buffer.y:
            return
        line_start = text.rfind("\n", 0, typed) + 1
        written = text[:line_start] + "\n".join(lines)
        if len(written) <= typed or not text.startswith(written):
            if self.waiting:  # read, and not what they meant: type on
                vim.loop.cancel(self.timer)
                self.timer = vim.loop.later(0, self.step)
            return
        vim.loop.cancel(self.timer)
        vim.tab()
        self.accepted += 1
        self.keys += 1
        self.typing[2] = len(written)
        self.timer = vim.loop.later(user_delay(self.seed, number, len(written), KEY_MS), self.step)

    def script(self) -> Generator[float, None, None]:
        vim = self.vim
        for number, task in enumerate(self.plan):
            files = self.packages[task.package]
            vim.files.update(files)
            for visit in task.visits:
                vim.open(visit.path)
                yield user_delay(self.seed, number, -1, READ_MS)
                vim.goto(visit.line)
                yield user_delay(self.seed, number, -2, READ_MS)
                if visit.yank:
                    vim.yank(visit.yank)
                    yield user_delay(self.seed, number, -3, KEY_MS)
            cut, text = function_edit(files, task)
            vim.files[task.path] = cut
            vim.buffers.pop(task.path, None)  # (the file as it now is on disk)
            vim.open(task.path)
            yield user_delay(self.seed, number, -4, READ_MS)
            vim.goto(task.first)  # the line above the function
            yield user_delay(self.seed, number, -5, KEY_MS)
            vim.open_below()
            self.keys += 1
            self.typing = [number, text, 0]
            self.waiting = vim.positions[-1][6] = True
            yield PATIENCE_MS
            while self.typing[2] < len(text):
                typed = self.typing[2]
                line_start = text.rfind("\n", 0, typed) + 1
                if text[typed] == "\n":  # Enter, the next line's indentation with it (autoindent's)
                    following = text[typed + 1:].split("\n", 1)[0]
                    indent = following[: indent_of(following)]
                    vim.enter(indent)
                    self.typing[2] = typed + 1 + len(indent)
                    self.keys += 1
                    self.waiting = vim.positions[-1][6] = True
                    yield PATIENCE_MS
                    continue
                elif typed == line_start and indent_of(text[typed:].split("\n", 1)[0]):  # the first line's indent
                    indent = text[typed:][: indent_of(text[typed:].split("\n", 1)[0])]
                    vim.type(indent)
                    self.typing[2] = typed + len(indent)
                    delay = user_delay(self.seed, number, self.typing[2], KEY_MS)
                else:
                    vim.type(text[typed])
                    self.typing[2] = typed + 1
                    self.typed += 1
                    delay = user_delay(self.seed, number, self.typing[2], KEY_MS)
                self.keys += 1
                yield delay
            self.typing = None
            vim.esc()
            yield user_delay(self.seed, number, -6, KEY_MS)
            vim.write()
            self.completed += 1
            yield user_delay(self.seed, number, -7, READ_MS)


# -- running against servers


def request_record(request: Request) -> dict:
    """A request as the record keeps it: when it was asked for, sent and answered (ms from the
    session's start), and what the answer said (llama-server's names, from response_fields)."""
    a = request.answer
    return {
        "kind": request.kind, "origin_ms": request.origin, "sent_ms": request.t_sent, "answered_ms": request.t_answer,
        "prompt_chars": len(request.body["input_prefix"]) + len(request.body["prompt"]),
        "extra": len(request.body["input_extra"]), "content": a.get("content"), "error": a.get("error"),
        "prompt_n": a.get("timings/prompt_n"), "prompt_ms": a.get("timings/prompt_ms"),
        "predicted_n": a.get("timings/predicted_n"), "predicted_ms": a.get("timings/predicted_ms"),
        "draft_n": a.get("timings/draft_n"), "draft_n_accepted": a.get("timings/draft_n_accepted"),
        "tokens_cached": a.get("tokens_cached"),
    }


def run_live(server, packages: dict, plan: Sequence[Task], seed: int, sampling: str, extra: Optional[dict] = None,
             loop: Optional[Loop] = None, jobs=None, drain_ms: float = 120_000) -> dict:
    """One session, live: the user types the plan against `server` (or `jobs` on `loop`, the
    tests'), llama.vim's requests sent when it sends them. Returns the run's record."""
    loop = loop or Loop(realtime=True)
    jobs = jobs or HttpJobs(loop, server, extra)
    vim = Vim(loop, jobs, {}, vim_rand(seed), sampling, seed)
    typist = Typist(vim, plan, packages, seed)
    loop.at(0, vim.enable)
    loop.at(0, typist.start)
    while not typist.done:
        loop.run_until(loop.now + 100)
    end = loop.now + drain_ms  # the answers still coming: their cost is counted, nothing more is typed
    while loop.now < end and any(r.t_answer is None for r in vim.sent):
        loop.run_until(loop.now + 100)
    return {
        "wall_s": loop.now / 1000,
        "user": {"keys": typist.keys, "typed_chars": typist.typed, "accepted": typist.accepted,
                 "functions_completed": typist.completed},
        "requests": [request_record(r) for r in vim.sent],
        "positions": [{"key_ms": t, "file": name, "line": y, "col": x, "shown_ms": shown, "by": by, "waits": waits}
                      for t, name, y, x, shown, by, waits in vim.positions],
    }


def run_sessions(systems: Sequence[str], start: Callable[[str], object], note, packages: dict, seed: int,
                 tasks: int, repeats: int, samplings: Sequence[str], n_ctx: int, live=None) -> dict:
    """Every system `repeats` times a sampling, each on a freshly started server, the order
    reversed every other repeat (drift favours none); `live` runs a session (:func:`run_live`, the
    tests' on a virtual clock). The record's `session` part."""
    plan = make_plan(packages, seed)[:tasks]
    runs, commands = [], {}
    for repeat in range(repeats):
        order = list(systems) if repeat % 2 == 0 else list(reversed(systems))
        for sampling in samplings:
            for system in order:
                kind, extra = session_system(system)
                server = start(kind)
                commands[system] = " ".join(getattr(server, "command", []))
                started = time.strftime("%Y-%m-%dT%H:%M:%S")
                try:
                    run = (live or run_live)(server, packages, plan, seed, sampling, extra)
                finally:
                    server.close()
                run.update(system=system, sampling=sampling, repeat=repeat, started=started)
                run["figures"] = run_figures(run)
                runs.append(run)
                f = run["figures"]
                note(f"session {system} {sampling} run {repeat + 1}: shown {_f(f['shown_median_s'], '.2f')} / "
                     f"{_f(f['shown_p90_s'], '.2f')} s (median / p90 of {f['shown_from_answer']}), "
                     f"{f['requests']} requests, {run['user']['accepted']} accepted, {run['wall_s']:.0f} s")
    return {
        "settings": {"seed": seed, "tasks": tasks, "repeats": repeats, "samplings": list(samplings),
                     "server_flags": SERVER_FLAGS, "n_ctx": n_ctx, "key_ms": KEY_MS, "patience_ms": PATIENCE_MS,
                     "read_ms": READ_MS, "reaction_ms": REACTION_MS},
        "plan": [{"package": t.package, "path": t.path, "first_line": t.first + 1, "lines": t.end - t.first,
                  "visits": [vars(v) for v in t.visits]} for t in plan],
        "commands": commands, "runs": runs,
    }


# -- figures


# A position's suggestion shown by a server's answer (to the request its key sent, or to a
# speculative one before it), not from the plugin's cache of earlier answers
SHOWN_BY_ANSWER = ("first", "speculative")


def shown_after_s(position: dict) -> float:
    """From the key that moved the cursor to the position to the suggestion shown there, s."""
    return (position["shown_ms"] - position["key_ms"]) / 1000


def run_figures(run: dict) -> dict:
    """A run's figures: the time to a shown suggestion (from the key that moved the cursor to the
    suggestion shown there, where a server's answer showed it), median and p90; positions shown
    from the cache at once and never shown; the requests, how long a first request waited in Vim
    for the one in flight, and the FIM requests sent while a warm-up was still in the server.
    Beside them, the line starts where the user waits: how many showed a suggestion while they
    waited, how many within each of WITHIN_S seconds, and the time to it there, PATIENCE_MS where
    none showed (the user typed on), median and p90 (None for a run recorded before positions said
    where the user waits)."""
    positions, requests = run["positions"], run["requests"]
    shown = [shown_after_s(p) for p in positions if p["by"] in SHOWN_BY_ANSWER]
    waits = [p for p in positions if p.get("waits")]
    waited = [PATIENCE_MS / 1000 if p["by"] is None else shown_after_s(p) for p in waits]
    first = [r for r in requests if r["kind"] == "first"]
    fim = [r for r in requests if r["kind"] != "warm-up"]
    warm = [r for r in requests if r["kind"] == "warm-up"]
    behind = [r for r in fim if any(w["sent_ms"] <= r["sent_ms"] < (w["answered_ms"] or float("inf")) for w in warm)]
    return {
        "positions": len(positions), "shown_from_answer": len(shown),
        "shown_from_cache": sum(1 for p in positions if p["by"] == "cache"),
        "never_shown": sum(1 for p in positions if p["by"] is None),
        "shown_median_s": percentile(shown, 0.5), "shown_p90_s": percentile(shown, 0.9),
        "waits": len(waits), "waits_shown": sum(1 for p in waits if p["by"] is not None),
        "wait_median_s": percentile(waited, 0.5), "wait_p90_s": percentile(waited, 0.9),
        "waits_within": [sum(1 for p, s in zip(waits, waited) if p["by"] is not None and s <= t) for t in WITHIN_S],
        "requests": len(requests), "first": len(first), "speculative": len(fim) - len(first), "warm_ups": len(warm),
        "first_wait_median_s": percentile([(r["sent_ms"] - r["origin_ms"]) / 1000 for r in first], 0.5),
        "fim_behind_warm_up": len(behind),
        "answer_median_s": percentile([(r["answered_ms"] - r["sent_ms"]) / 1000 for r in fim
                                       if r["answered_ms"] is not None], 0.5),
        "prompt_n": sum(r["prompt_n"] or 0 for r in requests), "predicted_n": sum(r["predicted_n"] or 0 for r in fim),
        "errors": sum(1 for r in requests if r["error"]),
    }


def session_summary(runs: Sequence[dict]) -> dict:
    """(system, sampling) -> the runs' figures: each run's median and p90, the median of those and
    their spread (lowest, highest); the line starts' curve (WITHIN_S), the runs pooled."""
    summary: dict = {}
    for run in runs:
        # figures recorded with the run win; those added since are computed from its positions
        f = {**run_figures(run), **run.get("figures", {})}
        row = summary.setdefault((run["system"], run["sampling"]), {"runs": 0, "medians": [], "p90s": [],
                                                                    "shown": [], "accepted": []})
        row["runs"] += 1
        row["medians"].append(f["shown_median_s"])
        row["p90s"].append(f["shown_p90_s"])
        row["shown"].append(f"{f['shown_from_answer']}+{f['shown_from_cache']}/{f['positions']}")
        if f.get("waits"):
            row.setdefault("waits", []).append(f"{f['waits_shown']}/{f['waits']}, {f['wait_median_s']:.2f}")
            row["waited"] = row.get("waited", 0) + f["waits"]
            row["within"] = [a + b for a, b in zip(row.get("within", [0] * len(WITHIN_S)), f["waits_within"])]
        row["accepted"].append(run["user"]["accepted"])
    for row in summary.values():
        for key in ("medians", "p90s"):
            values = [v for v in row[key] if v is not None]
            row[key[:-1] + "_of_runs"] = percentile(values, 0.5)
            row[key[:-1] + "_spread"] = (min(values), max(values)) if values else None
    return summary


def answered_at(run: dict) -> dict:
    """Position -> time to the suggestion an answer showed there, s. A position is its file, line,
    column and how often the user had been there before (a line typed again after an undo)."""
    times, visits = {}, {}
    for p in run["positions"]:
        where = (p["file"], p["line"], p["col"])
        visits[where] = visits.get(where, 0) + 1
        if p["by"] in SHOWN_BY_ANSWER:
            times[(*where, visits[where])] = shown_after_s(p)
    return times


def same_positions(runs: Sequence[dict]) -> list[dict]:
    """Per sampling, the first system run beside each other one, where both showed a suggestion
    from an answer: runs of the same repeat paired in order (the same user, typing the same keys
    but where one accepted a suggestion), the positions pooled. Like for like, where each system's
    own shown suggestions are not (one may show suggestions where the other shows none)."""
    grouped: dict = {}  # sampling -> system -> (repeat, its n-th run) -> answered_at
    for run in runs:
        system = grouped.setdefault(run["sampling"], {}).setdefault(run["system"], {})
        nth = sum(1 for repeat, _ in system if repeat == run["repeat"])
        system[(run["repeat"], nth)] = answered_at(run)
    rows = []
    for sampling, systems in grouped.items():
        (first, first_runs), *others = systems.items()
        for other, other_runs in others:
            paired = first_runs.keys() & other_runs.keys()
            pairs = [(first_runs[r][k], other_runs[r][k]) for r in paired
                     for k in first_runs[r].keys() & other_runs[r].keys()]
            rows.append({
                "sampling": sampling, "systems": (first, other), "runs": len(paired), "positions": len(pairs),
                "medians": tuple(percentile([p[i] for p in pairs], 0.5) for i in (0, 1)),
                "p90s": tuple(percentile([p[i] for p in pairs], 0.9) for i in (0, 1)),
                "sooner": sum(1 for a, b in pairs if a < b), "later": sum(1 for a, b in pairs if a > b),
            })
    return rows


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def session_table(summary: dict) -> str:
    header = ["system", "sampling", "runs", "time to shown: median s (spread)", "p90 s (spread)",
              "shown by answer+cache / positions, a run", "line starts shown / waited, median s, a run",
              f"line starts shown within {'/'.join(map(str, WITHIN_S))} s, runs pooled", "accepted, a run"]
    rows = []
    for (system, sampling), s in summary.items():
        spread = lambda k: "-" if s[k] is None else f"{s[k][0]:.2f}-{s[k][1]:.2f}"  # noqa: E731
        rows.append([system, sampling, s["runs"], f"{_f(s['median_of_runs'], '.2f')} ({spread('median_spread')})",
                     f"{_f(s['p90_of_runs'], '.2f')} ({spread('p90_spread')})", ", ".join(s["shown"]),
                     "; ".join(s.get("waits", ["-"])),
                     f"{'/'.join(map(str, s['within']))} of {s['waited']}" if "within" in s else "-",
                     ", ".join(map(str, s["accepted"]))])
    return grid(header, rows)


def print_session(part: dict) -> None:
    runs = part.get("runs") or []
    if not runs:
        return
    settings = part.get("settings", {})
    print(f"\n== typing session, llama.vim live ({settings.get('tasks')} functions, seed {settings.get('seed')}; "
          "time to a shown suggestion: from the key to the suggestion an answer showed there) ==")
    print(session_table(session_summary(runs)))
    for row in same_positions(runs):
        first, other = row["systems"]
        print(f"{row['sampling']}, the same positions shown by an answer on both ({row['runs']} pairs of runs of one "
              f"repeat, pooled): {row['positions']}; median / p90 {first} {_f(row['medians'][0], '.2f')} / "
              f"{_f(row['p90s'][0], '.2f')} s, {other} {_f(row['medians'][1], '.2f')} / {_f(row['p90s'][1], '.2f')} s; "
              f"{first} sooner at {row['sooner']}, later at {row['later']}")


def plot_session(path: str, part: dict) -> None:
    """Time to a shown suggestion per system and sampling, every run's positions pooled, each a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict = {}
    for run in part["runs"]:
        groups.setdefault(f"{run['system']}\n{run['sampling']}", []).extend(
            shown_after_s(p) for p in run["positions"] if p["by"] in SHOWN_BY_ANSWER)
    fig, ax = plt.subplots(figsize=(8, 5))
    jitter = random.Random(0)
    names = list(groups)
    ax.boxplot([groups[n] or [float("nan")] for n in names], showfliers=False, widths=0.5)
    for i, name in enumerate(names):
        ax.scatter([i + 1 + jitter.uniform(-0.15, 0.15) for _ in groups[name]], groups[name], s=9, alpha=0.6)
    ax.set_xticks(range(1, len(names) + 1))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time to a shown suggestion, s (log scale)")
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle("llama.vim typing session, live: every run's shown suggestions", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_session_workload(args, kwargs: dict, note, server_binary: Optional[str], wanted: Optional[list]) -> dict:
    """--editor session: its systems (alternating), on servers with llama.vim's flags, each at its
    own flash-attention default, and a context of at least SESSION_N_CTX."""
    # the session's own systems, and the points of a sweep, in the order named
    systems = [s for s in (wanted or SESSION_DEFAULT_SYSTEMS) if s in SESSION_SYSTEMS or s not in SYSTEMS]
    for name in systems:
        session_system(name)
    if server_binary is None:
        systems = [s for s in systems if not s.startswith("llama-server")]
    if not systems:
        raise ValueError("--editor session: no system to run (llama-server needs --llama-server PATH)")
    tasks = getattr(args, "session_tasks", None) or DEFAULT_TASKS
    repeats = getattr(args, "session_repeats", None) or DEFAULT_REPEATS
    samplings = getattr(args, "session_sampling", None) or list(SAMPLINGS[:1])
    if tasks < 1 or repeats < 1 or set(samplings) - set(SAMPLINGS):
        raise ValueError(f"--session-tasks, --session-repeats: at least 1; --session-sampling: of {', '.join(SAMPLINGS)}")
    session_kwargs = dict(kwargs, n_ctx=max(kwargs["n_ctx"], SESSION_N_CTX), flash_attn="default")
    with open(session_kwargs["model_path"], "rb") as f:  # in the page cache before the first server maps it
        while f.read(1 << 24):
            pass

    def start(kind: str) -> Server:
        note(f"starting {kind}")
        return Server(kind, session_kwargs, server_binary, args.editor_log)

    return run_sessions(systems, start, note, release_files(), args.seed, tasks, repeats, samplings,
                        session_kwargs["n_ctx"])
