"""`python -m benchmarks.editors --editor session`: a user typing functions into real files in Vim
with llama.vim, and the requests llama.vim sends for it, replayed in order against each server.

**The port.** llama.vim's FIM code (ggml-org/llama.vim autoload/llama.vim at a1c8e6e, its default
g:llama_config), function by function, as the requests it sends:

- ``s:fim_ctx_local`` (:func:`fim_ctx_local`): the 256 lines before the cursor's line and 64 after
  it, the cursor's line up to the cursor as ``prompt`` (a line of whitespace counts as empty, at
  indent 0); with a shown suggestion ``prev``, the context as if it were accepted.
- ``llama#fim`` (:meth:`Vim.fim`): the ``/infill`` body (``n_predict`` 128, ``top_k`` 40, ``top_p``
  0.90, its samplers, ``cache_prompt``, ``t_max_prompt_ms`` 500, ``t_max_predict_ms`` 250 for a
  request without ``prev`` ("the first request is quick") and 1000 (``g:llama_config``) for the
  speculative one, ``response_fields``, ``id_slot`` 0); no request where one of its four hashes
  (the context, and the context less its first 1-3 prefix lines) is cached; the random chunk
  around the cursor that evicts ring chunks more than 0.5 similar to it; the two chunks it picks
  (the prefix beyond the 256 lines, the suffix beyond the 64) when the cursor moved more than 32
  lines since the last pick.
- the cache of answers (``s:cache_insert``/``s:cache_get``, 250 keys, LRU) and ``s:fim_try_hint``
  (:meth:`Vim.try_hint`): a suggestion is shown from the cache, for the context's hash or for a
  cached answer up to 128 characters back that the typed characters match; once shown, the
  speculative request for the position after it (``llama#fim`` with ``prev`` = the suggestion).
- ``s:fim_render`` (:func:`render`): the suggestion's lines, the rules that blank one repeating the
  text after the cursor, ``can_accept``; ``llama#fim_accept('full')``.
- the ring buffer (:class:`Ring`): ``s:pick_chunk`` (a chunk of at most 33 lines of the text it is
  given; none of fewer than 3 lines, none already held, similar ones over 0.9 evicted or the new
  one dropped, 16 queued at most) on BufEnter, BufLeave, BufWritePost (65 lines around the
  cursor, not from a modified buffer) and on a yank; ``s:ring_update`` moving the oldest queued
  chunk into the ring (16 chunks) and sending the ``n_predict: 0`` warm-up request with the new
  ``input_extra``.

The bodies are llama.vim's with the bench's two changes of :mod:`.llama_vim`: greedy sampling
(``"temperature"`` after its samplers, temperature 0) so that systems' texts can be compared, and
``response_fields`` asking also for the timings the bench reads (the warm-up's ``[""]`` too). The
chunks' ``time`` (Vim's ``reltime()``) is a counter of the user's events here; servers ignore it.

**The user** (:func:`make_plan`, :class:`Session`). Two packages' release files
(:mod:`plookup.app.bench.releases`); in each, functions of 4-10 lines, each a task: the user reads
another file of the package (a visit: BufEnter at line 1, a jump to a random line, sometimes a yank of 3-10 lines there, BufLeave),
opens the task's file cut before the function (BufEnter, the cursor on the line above), opens a new
line (``o``) and types the function back, line by line, saves (BufWritePost). A typing event is a
CursorMovedI: at the start of every line (after Enter) and after every ``chars`` (20) characters
typed past the line's indentation; llama.vim's own trigger is every cursor move in insert mode,
one request in flight at a time (a newer move waits 100 ms ticks for it, the older waits dropped),
so on a machine where an answer takes seconds a request per few words is what it sends. At each
event: ``s:on_move`` (the cache's suggestion and its speculative request), then ``llama#fim`` for
the cursor; the user waits for the answers, and accepts the shown suggestion (Tab) when the text
it writes is the text they were going to type (the function's own), else types on to the next
event. After a function's last line the user stops (Esc, ``:w``); the session stops at
``limit`` requests. llama.vim's ring timer moves a chunk every second in normal mode, and in
insert mode once the cursor has not moved for 3 s: here one warm-up is sent after every event
(typing or moving between files) while a chunk is queued, the wait for a suggestion being seconds
on the machines this bench runs on. Everything drawn (the tasks, the visits, Vim's ``rand()``) is
drawn from the seed.

**The replay** (:func:`run_session`). The first system (llama-server, as llama.vim recommends it:
``-ub 1024 -b 1024 --cache-reuse 256``) runs the session live: its answers decide what the user
sees and accepts, hence which requests follow. Its request sequence is then sent, in order and
unchanged, to every other system, each on a freshly started server with the same flags. Per
system: the end-to-end time of each FIM request (time to suggestion), median and p90, for the
first requests at a position and for the speculative ones; the prompt tokens evaluated
(``timings/prompt_n``) over FIM requests and over warm-ups; and the tokens shown within the budget.
llama.vim has no client-side timeout (its curl runs until the server answers) and llama-server
does not implement ``t_max_prompt_ms``; ``t_max_predict_ms`` ends the generation at the first line
end after it. So a suggestion arrives however late, and is shown if the cursor is still there: the
budget here is the one llama.vim asks for, ``t_max_prompt_ms`` + ``t_max_predict_ms`` (750 ms for a
first request, 1500 ms for a speculative one), and "tokens in budget" are the ``predicted_n`` of
the answers that arrived within it.

Positions are in characters where Vim counts bytes (``col('.')``, ``strpart``): the same for the
ASCII source files used here.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Generator, Optional, Sequence

from plookup.app.tables import grid

from .llama_vim import (
    N_PREFIX,
    N_SUFFIX,
    RING_CHUNK_SIZE,
    T_MAX_PROMPT_MS,
    Server,
    functions,
    infill_body,
    release_files,
)

# g:llama_config's defaults, and llama.vim's constants
T_MAX_PREDICT_MS = 1000  # a speculative request's budget (g:llama_config.t_max_predict_ms)
T_FIRST_PREDICT_MS = 250  # llama#fim: a request without `prev` ("the first request is quick")
MAX_LINE_SUFFIX = 8
MAX_CACHE_KEYS = 250
RING_N_CHUNKS = 16
RING_SCOPE = 1024
RING_QUEUE = 16  # s:pick_chunk: "TODO: become parameter ?"
LOOKBACK = 128  # s:fim_try_hint: characters behind the cursor
PICK_DISTANCE = 32  # llama#fim picks chunks when the cursor moved more lines than this
EVICT_SIMILAR, DROP_SIMILAR = 0.5, 0.9  # llama#fim's and s:pick_chunk's similarity bounds
WARM_UP_FIELDS = ["timings/prompt_n", "timings/prompt_ms", "tokens_cached"]  # what the bench reads of a warm-up

# The user model
DEFAULT_REQUESTS = 84
CHARS_PER_EVENT = 20
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
SESSION_DEFAULT_SYSTEMS = ("llama-server", "llama-server ngram-mod", "plookup")
KINDS = ("first", "speculative", "warm-up")


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
    time: int
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
        return [{"text": c.text, "time": [c.time, 0], "filename": c.filename} for c in self.chunks]


def fim_body(ctx: dict, extra: list, t_max_predict_ms: int) -> dict:
    """llama#fim's request, greedy (see the module's docstring); `model` is there because
    llama.vim tests ``len("g:llama_config.model_fim")``, the name's length, and sends its empty default."""
    body = infill_body(ctx["prefix"], ctx["suffix"], extra, ctx["middle"], ctx["indent"], t_max_predict_ms)
    return {**body, "model": ""}


def warm_up_body(extra: list) -> dict:
    """s:ring_update's request: the ring's chunks, nothing to predict."""
    return {
        "id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
        "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1, "response_fields": [""] + WARM_UP_FIELDS, "model": "",
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


# -- the requests


@dataclass
class Request:
    kind: str  # "first" (llama#fim without prev), "speculative" (with prev), "warm-up" (s:ring_update)
    body: dict
    where: dict = field(default_factory=dict)  # the task, the characters typed, the cursor
    hashes: tuple = ()
    prev: tuple = ()


class SessionFull(Exception):
    """The session sent its `limit` requests."""


Answers = Generator[Request, dict, None]


class Vim:
    """llama.vim's state in one Vim: the ring, the cache, the shown suggestion, Vim's rand()."""

    def __init__(self, rng: random.Random, limit: int):
        self.rng, self.limit = rng, limit
        self.ring = Ring()
        self.cache: OrderedDict[str, dict] = OrderedDict()
        self.hint_shown = False
        self.fim_data: dict = {}
        self.indent_last = -1
        self.pos_y_pick = -9999
        self.buffer: Optional[Buffer] = None
        self.clock = 0  # the user's events, as the chunks' `time`
        self.where: dict = {}
        self.sent = 0

    def rand(self, i0: int, i1: int) -> int:
        return self.rng.randint(i0, i1)

    # the cache (s:cache_insert, s:cache_get)

    def cache_insert(self, key: str, value: dict) -> None:
        if len(self.cache) > MAX_CACHE_KEYS - 1:
            self.cache.popitem(last=False)
        self.cache[key] = value
        self.cache.move_to_end(key)

    def cache_get(self, key: str) -> Optional[dict]:
        if key not in self.cache:
            return None
        self.cache.move_to_end(key)
        return self.cache[key]

    # sending

    def send(self, request: Request) -> Generator[Request, dict, dict]:
        if self.sent >= self.limit:
            raise SessionFull
        self.sent += 1
        request.where = dict(self.where)
        answer = yield request
        return answer or {}

    # the ring

    def pick_chunk(self, text: Sequence[str], no_mod: bool, do_evict: bool) -> bool:
        buf = self.buffer
        if no_mod and (buf is None or buf.modified):
            return False
        return self.ring.pick(text, buf.name if buf else "", self.clock, do_evict, self.rand)

    def ring_update(self) -> Answers:
        """The timer's tick: a queued chunk into the ring, and the warm-up request."""
        if self.ring.update():
            yield from self.send(Request("warm-up", warm_up_body(self.ring.extra())))

    # FIM

    def hide(self) -> None:
        self.hint_shown = False

    def on_move(self) -> Answers:
        """s:on_move (CursorMovedI): hide the suggestion, show the cache's for the cursor."""
        self.clock += 1
        self.hide()
        yield from self.try_hint(self.buffer.x, self.buffer.y)

    def fim(self, pos_x: int, pos_y: int, is_auto: bool, prev: Sequence[str], use_cache: bool) -> Answers:
        """llama#fim (its request in flight finished first: the bench waits for every answer)."""
        buf = self.buffer
        ctx = fim_ctx_local(buf, pos_x, pos_y, prev, self.indent_last)
        if is_auto and len(ctx["line_cur_suffix"]) > MAX_LINE_SUFFIX:
            return
        t_max_predict_ms = T_MAX_PREDICT_MS if prev else T_FIRST_PREDICT_MS
        hashes = context_hashes(ctx["prefix"], ctx["middle"], ctx["suffix"])
        if use_cache:
            for key in hashes:
                if self.cache_get(key) is not None:
                    return
        self.indent_last = ctx["indent"]
        # a chunk around the cursor: ring chunks like it would make the model repeat the text there
        half = RING_CHUNK_SIZE // 2
        near = take_chunk(buf.getlines(max(1, buf.y - half), min(buf.y + half, buf.last)), self.rand)
        for i in range(len(self.ring.chunks) - 1, -1, -1):
            if chunk_sim(self.ring.chunks[i].data, near) > EVICT_SIMILAR:
                del self.ring.chunks[i]
                self.ring.n_evict += 1
        request = Request("speculative" if prev else "first", fim_body(ctx, self.ring.extra(), t_max_predict_ms),
                          hashes=tuple(hashes), prev=tuple(prev))
        # (the picks run once the request is sent, before its answer comes back)
        if is_auto and abs(pos_y - self.pos_y_pick) > PICK_DISTANCE:
            last = buf.last
            self.pick_chunk(buf.getlines(max(1, pos_y - RING_SCOPE), max(1, pos_y - N_PREFIX)), False, False)
            self.pick_chunk(buf.getlines(min(last, pos_y + N_SUFFIX), min(last, pos_y + N_SUFFIX + RING_CHUNK_SIZE)),
                            False, False)
            self.pos_y_pick = pos_y
        answer = yield from self.send(request)
        yield from self.on_response(request, answer)

    def on_response(self, request: Request, answer: dict) -> Answers:
        """s:fim_on_response: cache the answer under every hash; show it where nothing is shown."""
        if not isinstance(answer.get("content"), str):
            return
        for key in request.hashes:
            self.cache_insert(key, {"content": answer["content"]})
        if not self.hint_shown or not self.fim_data.get("can_accept"):
            yield from self.try_hint(self.buffer.x, self.buffer.y)

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

    def try_hint(self, pos_x: int, pos_y: int) -> Answers:
        """s:fim_try_hint: show the cache's suggestion, then the speculative request after it."""
        found = self.lookup(pos_x, pos_y)
        if found is None:
            return
        self.fim_data = render(self.buffer, pos_x, pos_y, found["content"])
        self.hint_shown = True
        yield from self.fim(pos_x, pos_y, True, self.fim_data["content"], True)


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


def event_offsets(text: str, chars: int = CHARS_PER_EVENT) -> list:
    """Where the typist's events fall in `text` (offsets: characters typed): each line's start,
    and every `chars` characters typed past its indentation, inside the line."""
    offsets, start = [], 0
    for line in text.split("\n"):
        offsets.append(start)
        indent = indent_of(line)
        k = 1
        while indent + k * chars < len(line):
            offsets.append(start + indent + k * chars)
            k += 1
        start += len(line) + 1
    return offsets


class Session:
    """The user's session (:func:`make_plan`'s tasks) in a :class:`Vim`: :meth:`requests` yields
    each request and takes its answer (the server's JSON, `content` read); up to `limit`."""

    def __init__(self, plan: Sequence[Task], packages: dict, seed: int, limit: int = DEFAULT_REQUESTS,
                 chars: int = CHARS_PER_EVENT):
        self.plan, self.packages, self.limit, self.chars = list(plan), packages, limit, chars
        self.vim = Vim(random.Random(f"llama.vim rand {seed}"), limit)
        self.accepted = 0  # suggestions accepted
        self.events = 0  # typing events
        self.typed = 0  # characters the user typed (not accepted)
        self.completed = 0  # functions written

    def requests(self) -> Answers:
        try:
            yield from self.run()
        except SessionFull:
            return

    def tick(self) -> Answers:
        """Between two of the user's events: the ring's timer, where a chunk is queued."""
        yield from self.vim.ring_update()

    def switch(self, buf: Buffer) -> Answers:
        """Leave the current buffer (BufLeave), enter `buf` (BufEnter's pick, 100 ms later)."""
        vim = self.vim
        if vim.buffer is not None:
            vim.pick_chunk(vim.buffer.around_cursor(), True, True)
        vim.buffer = buf
        vim.clock += 1
        vim.pick_chunk(buf.around_cursor(), True, True)
        yield from self.tick()

    def run(self) -> Answers:
        vim, others = self.vim, {}
        for number, task in enumerate(self.plan):
            files = self.packages[task.package]
            vim.where = {"task": number}
            for visit in task.visits:
                buf = others.setdefault((task.package, visit.path),
                                        Buffer(visit.path, files[visit.path].splitlines()))
                yield from self.switch(buf)
                buf.y, vim.clock = visit.line, vim.clock + 1
                if visit.yank:
                    vim.pick_chunk(buf.getlines(visit.line, visit.line + visit.yank - 1), False, True)
                yield from self.tick()
            lines = files[task.path].splitlines()
            before, after = lines[: task.first], lines[task.end:]
            text = "\n".join(lines[task.first : task.end])
            buf = Buffer(task.path, before + after, y=max(1, task.first))
            yield from self.switch(buf)
            yield from self.type_function(buf, before, text, after, number)
            buf.modified = False  # :w
            vim.pick_chunk(buf.around_cursor(), True, True)
            yield from self.tick()
            self.completed += 1

    def type_function(self, buf: Buffer, before: list, text: str, after: list, number: int) -> Answers:
        """`o` on the line above, then the function's text, one event at a time."""
        vim = self.vim
        offsets = event_offsets(text, self.chars)
        typed = 0
        buf.modified = True

        def place(typed: int) -> list:  # the buffer with `typed` characters of the function, the cursor after them
            done = text[:typed].split("\n")
            buf.lines = before + done + after
            buf.y, buf.x = len(before) + len(done), len(done[-1])
            return done

        while True:
            done = place(typed)
            vim.where = {"task": number, "typed": typed, "y": buf.y, "x": buf.x}
            self.events += 1
            yield from vim.on_move()
            yield from vim.fim(buf.x, buf.y, True, [], True)  # llama#fim(-1, -1, ...): the cursor
            lines = accepted_lines(vim.fim_data) if vim.hint_shown else None
            if lines is not None:
                line_start = len(text[:typed]) - len(done[-1])
                written = text[:line_start] + "\n".join(lines)
                if len(written) > typed and text.startswith(written):
                    self.accepted += 1
                    vim.hide()
                    typed = len(written)
                    if typed >= len(text):
                        place(typed)
                        return
                    yield from self.tick()
                    continue
            later = [o for o in offsets if o > typed]
            self.typed += (later[0] if later else len(text)) - typed
            if not later:
                vim.hide()  # the last characters, Esc
                place(len(text))
                return
            typed = later[0]
            yield from self.tick()


def drive(session: Session, answer: Callable[[Request], dict]) -> list:
    """Run the session with `answer` standing for the server: [(request, its answer)]."""
    exchanges = []
    gen = session.requests()
    try:
        request = next(gen)
        while True:
            reply = answer(request)
            exchanges.append((request, reply))
            request = gen.send(reply)
    except StopIteration:
        pass
    return exchanges


# -- running against servers


def session_record(request: Request, answer: dict, seconds: float, index: int) -> dict:
    """One answer as the record keeps it (llama-server's names, from response_fields)."""
    return {
        "index": index, "kind": request.kind, "seconds": seconds,
        "budget_ms": request.body.get("t_max_predict_ms") if request.kind != "warm-up" else None,
        "content": answer.get("content", ""), "prompt_n": answer.get("timings/prompt_n"),
        "prompt_ms": answer.get("timings/prompt_ms"), "predicted_n": answer.get("timings/predicted_n", 0),
        "predicted_ms": answer.get("timings/predicted_ms", 0.0), "draft_n": answer.get("timings/draft_n"),
        "draft_n_accepted": answer.get("timings/draft_n_accepted"), "stop_type": answer.get("stop_type"),
        "tokens_cached": answer.get("tokens_cached"),
    }


def script_entry(request: Request, chunk_ids: dict) -> dict:
    """A request as the record keeps it: the body less its bulky text (the chunks by id, the
    prefix and suffix by size), its hash over the whole body."""
    body = request.body
    slim = {k: v for k, v in body.items() if k not in ("input_prefix", "input_suffix", "input_extra", "response_fields")}
    ids = []
    for chunk in body["input_extra"]:
        key = (chunk["filename"], chunk["text"])
        ids.append(chunk_ids.setdefault(key, len(chunk_ids)))
    return {"kind": request.kind, "where": request.where, "prev": list(request.prev), "extra": ids,
            "prefix_chars": len(body["input_prefix"]), "suffix_chars": len(body["input_suffix"]),
            "body_sha256": sha256(json.dumps(body, sort_keys=True)), **slim}


def describe(request: Request, record: dict) -> str:
    r = record
    head = f"{request.kind} {r['index'] + 1}"
    if request.kind == "warm-up":
        return f"{head}: {len(request.body['input_extra'])} chunks, prompt {r['prompt_n']} in {r['seconds']:.1f} s"
    return (f"{head}: {r['predicted_n']} tokens, prompt {r['prompt_n']} in {(r['prompt_ms'] or 0):.0f} ms, "
            f"{r['seconds']:.2f} s")


def run_session(system: str, server, script: Optional[list], session: Optional[Session], note,
                extra: Optional[dict] = None) -> tuple[list, list, float]:
    """One system's pass on a started `server`: live (driving `session`, whose answers decide
    the requests) where `script` is None, else the recorded requests in order. Returns the
    requests, the records and the wall seconds of the pass."""
    extra = extra or {}
    requests, records = [], []
    start = time.perf_counter()

    def post(request: Request) -> dict:
        answer, seconds = server.post("/infill", {**request.body, **extra})
        records.append(session_record(request, answer, seconds, len(records)))
        requests.append(request)
        note(f"session {system} {describe(request, records[-1])}")
        return answer

    if script is None:
        drive(session, post)
    else:
        for request in script:
            post(request)
    return requests, records, time.perf_counter() - start


def run_sessions(systems: Sequence[str], start: Callable[[str], object], note, packages: dict, seed: int,
                 limit: int, n_ctx: int, chars: int = CHARS_PER_EVENT) -> dict:
    """The session on every system in turn, each on a freshly started server: the first live,
    the others replaying its requests. The record's `session` part."""
    plan = make_plan(packages, seed)
    session = Session(plan, packages, seed, limit, chars)
    script, runs, walls, commands = None, {}, {}, {}
    for system in systems:
        kind, extra = SESSION_SYSTEMS[system]
        server = start(kind)
        commands[system] = " ".join(getattr(server, "command", []))
        try:
            requests, records, wall = run_session(system, server, script, session if script is None else None,
                                                  note, extra)
        finally:
            server.close()
        if script is None:
            script = requests
        runs[system], walls[system] = records, wall
    chunk_ids: dict = {}
    entries = [script_entry(r, chunk_ids) for r in script or []]
    return {
        "settings": {"requests": limit, "chars_per_event": chars, "seed": seed, "server_flags": SERVER_FLAGS,
                     "n_ctx": n_ctx},
        "driver": systems[0] if systems else None,
        "plan": [{"package": t.package, "path": t.path, "first_line": t.first + 1, "lines": t.end - t.first,
                  "visits": [vars(v) for v in t.visits]} for t in plan],
        "user": {"events": session.events, "accepted": session.accepted, "typed_chars": session.typed,
                 "functions_completed": session.completed},
        "chunks": [{"filename": name, "text": text} for (name, text), _ in sorted(chunk_ids.items(), key=lambda x: x[1])],
        "script": entries, "commands": commands, "walls": walls, "runs": runs,
    }


# -- figures


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-quantile (0..1) by linear interpolation between the sorted values (numpy's default)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def in_budget(record: dict) -> bool:
    """Whether a FIM answer arrived within the time llama.vim asks for: t_max_prompt_ms + t_max_predict_ms."""
    return record["seconds"] * 1000 <= T_MAX_PROMPT_MS + (record["budget_ms"] or 0)


def session_summary(runs: dict, driver: Optional[str] = None) -> dict:
    """system -> its figures (see the module's docstring)."""
    reference = {r["index"]: r for r in runs.get(driver, [])} if driver else {}
    summary = {}
    for system, records in runs.items():
        by_kind = {kind: [r for r in records if r["kind"] == kind] for kind in KINDS}
        fim = by_kind["first"] + by_kind["speculative"]
        row = {"requests": {kind: len(rs) for kind, rs in by_kind.items()}}
        for kind in ("first", "speculative"):
            seconds = [r["seconds"] for r in by_kind[kind]]
            row[f"{kind}_median_s"] = percentile(seconds, 0.5)
            row[f"{kind}_p90_s"] = percentile(seconds, 0.9)
        row["prompt_n_fim"] = sum(r["prompt_n"] or 0 for r in fim)
        row["prompt_n_warm_up"] = sum(r["prompt_n"] or 0 for r in by_kind["warm-up"])
        row["prompt_ms_fim"] = sum(r["prompt_ms"] or 0 for r in fim)
        row["prompt_ms_warm_up"] = sum(r["prompt_ms"] or 0 for r in by_kind["warm-up"])
        row["in_budget"] = sum(1 for r in fim if in_budget(r))
        row["tokens_in_budget"] = sum(r["predicted_n"] or 0 for r in fim if in_budget(r))
        row["tokens"] = sum(r["predicted_n"] or 0 for r in fim)
        row["seconds"] = sum(r["seconds"] for r in records)
        row["drafted"] = sum(r["draft_n"] or 0 for r in fim)
        row["accepted"] = sum(r["draft_n_accepted"] or 0 for r in fim)
        if reference and system != driver:
            row["same_text"] = sum(1 for r in fim if r["index"] in reference and reference[r["index"]]["content"] == r["content"])
            row["same_as"] = driver
        summary[system] = row
    return summary


def prompt_differences(runs: dict, driver: str, ratio: float = 1.5, slack: int = 32) -> dict:
    """system -> [(request index, kind, the driver's prompt_n, its prompt_n)] where its prompt_n
    is over `ratio` x the driver's + `slack`: the same body evaluated much more there."""
    reference = {r["index"]: r for r in runs.get(driver, [])}
    found = {}
    for system, records in runs.items():
        if system == driver:
            continue
        rows = [(r["index"], r["kind"], reference[r["index"]]["prompt_n"], r["prompt_n"]) for r in records
                if r["index"] in reference and r["prompt_n"] is not None and reference[r["index"]]["prompt_n"] is not None
                and r["prompt_n"] > ratio * reference[r["index"]]["prompt_n"] + slack]
        if rows:
            found[system] = rows
    return found


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def session_table(summary: dict, walls: Optional[dict] = None) -> str:
    header = ["system", "first: median / p90 s", "speculative: median / p90 s", "prompt tokens FIM / warm-up",
              "answers in budget", "tokens in budget / all", "accepted/drafted", "wall s", "text = driver's"]
    rows = []
    for system, s in summary.items():
        n = s["requests"]
        same = f"{s['same_text']}/{n['first'] + n['speculative']}" if "same_text" in s else "(driver)"
        wall = (walls or {}).get(system)
        rows.append([
            system, f"{_f(s['first_median_s'], '.2f')} / {_f(s['first_p90_s'], '.2f')} ({n['first']})",
            f"{_f(s['speculative_median_s'], '.2f')} / {_f(s['speculative_p90_s'], '.2f')} ({n['speculative']})",
            f"{s['prompt_n_fim']} / {s['prompt_n_warm_up']} ({n['warm-up']})",
            f"{s['in_budget']}/{n['first'] + n['speculative']}", f"{s['tokens_in_budget']} / {s['tokens']}",
            f"{s['accepted']}/{s['drafted']}", _f(wall if wall is not None else s["seconds"], ".0f"), same,
        ])
    return grid(header, rows)


def print_session(part: dict) -> None:
    runs, driver = part.get("runs") or {}, part.get("driver")
    if not runs:
        return
    user = part.get("user", {})
    print(f"\n== typing session, llama.vim's requests replayed in order ({len(part.get('script', []))} requests, "
          f"{user.get('accepted', 0)} suggestions accepted, {user.get('functions_completed', 0)} functions written; "
          f"driven by {driver}; budget: t_max_prompt_ms + t_max_predict_ms) ==")
    print(session_table(session_summary(runs, driver), part.get("walls")))
    for system, rows in prompt_differences(runs, driver).items():
        listed = ", ".join(f"#{i + 1} {kind} {a} -> {b}" for i, kind, a, b in rows[:8])
        print(f"prompt_n over 1.5x {driver}'s on {system}: {listed}{' ...' if len(rows) > 8 else ''}")


def plot_session(path: str, part: dict) -> None:
    """Time to suggestion per system: the first requests' and the speculative ones', each answer a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = part["runs"]
    systems = list(runs)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    jitter = random.Random(0)
    for ax, kind, budget in zip(axes, ("first", "speculative"), (T_FIRST_PREDICT_MS, T_MAX_PREDICT_MS)):
        data = [[r["seconds"] for r in runs[s] if r["kind"] == kind] for s in systems]
        ax.boxplot([d or [float("nan")] for d in data], showfliers=False, widths=0.5)
        for i, values in enumerate(data):
            ax.scatter([i + 1 + jitter.uniform(-0.15, 0.15) for _ in values], values, s=9, alpha=0.6)
        ax.axhline((T_MAX_PROMPT_MS + budget) / 1000, color="grey", linestyle="--",
                   label=f"llama.vim's budget {(T_MAX_PROMPT_MS + budget) / 1000:.2f} s")
        ax.set_xticks(range(1, len(systems) + 1))
        ax.set_xticklabels(systems, rotation=15, fontsize=8)
        ax.set_title(f"{kind} requests ({len(data[0]) if data else 0} each)")
        ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("time to suggestion, s (end to end, log scale)")
    fig.suptitle("llama.vim typing session: the same requests on each server", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_session_workload(args, kwargs: dict, note, server_binary: Optional[str], wanted: Optional[list]) -> dict:
    """--editor session: its systems in the order named (the first drives the session), on
    servers with llama.vim's flags and a context of at least SESSION_N_CTX."""
    limit = getattr(args, "session_requests", None) or DEFAULT_REQUESTS
    if limit < 1:
        raise ValueError("--session-requests: at least 1")
    systems = [s for s in (wanted or SESSION_DEFAULT_SYSTEMS) if s in SESSION_SYSTEMS]
    if server_binary is None:
        systems = [s for s in systems if not s.startswith("llama-server")]
    if not systems:
        raise ValueError("--editor session: no system to run (llama-server needs --llama-server PATH)")
    session_kwargs = dict(kwargs, n_ctx=max(kwargs["n_ctx"], SESSION_N_CTX))
    # the same flash attention on both servers (llama-server's -fa as Server gives it)
    flash = f" -fa {'on' if session_kwargs.get('flash_attn') else 'off'}"
    with open(session_kwargs["model_path"], "rb") as f:  # in the page cache before the first server maps it
        while f.read(1 << 24):
            pass

    def start(kind: str) -> Server:
        kind += flash if kind.startswith("plookup serve") else ""
        note(f"starting {kind}")
        return Server(kind, session_kwargs, server_binary, args.editor_log)

    return run_sessions(systems, start, note, release_files(), args.seed, limit, session_kwargs["n_ctx"])
