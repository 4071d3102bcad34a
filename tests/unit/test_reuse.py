"""plookup.engine.reuse: llama-server's chunk reuse by KV shift, on a fake memory that holds a
token per position. After the moves and the roll-back past them, the cells hold exactly the new
prompt's first n tokens, each at its position; the chunks moved are at least N tokens long.

Then the reuse past llama-server's walk (new tokens between chunks, cells kept from an earlier
prompt): the plan against a plain reading of its rule, and whole requests through the engine's
admission and step on a fake unified memory that holds llama.cpp's rules (a shift moves a cell for
every sequence sharing it; a sequence's positions are decoded in order): the cells hold the prompt
and output, the rows evaluated are the ones counted, the kept cells the ones recorded."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.engine import reuse
from plookup.engine.reuse import Move, apply_moves, shift_plan


class Cells:
    """A sequence's cells: position -> token, as the context handle's ``remove`` and ``shift``
    (llama_memory_seq_rm / _seq_add) edit them."""

    def __init__(self, tokens):
        self.at = dict(enumerate(tokens))

    def remove(self, seq, p0, p1):
        self.at = {p: t for p, t in self.at.items() if not p0 <= p < (p1 if p1 >= 0 else 1 << 62)}
        return True

    def shift(self, seq, p0, p1, delta):
        moved = {p + delta: t for p, t in self.at.items() if p0 <= p < p1}
        kept = {p: t for p, t in self.at.items() if not p0 <= p < p1}
        assert not set(moved) & set(kept), "a chunk moved onto cells still held"
        self.at = {**kept, **moved}


def reused(cached: list[int], prompt: list[int], min_chunk: int) -> tuple[int, list[Move], Cells]:
    """(positions held, the moves, the cells) after llama-server's walk from the common prefix."""
    cells = Cells(cached)
    start = next((i for i, (a, b) in enumerate(zip(cached, prompt)) if a != b), min(len(cached), len(prompt)))
    tokens = np.array(cached + [0] * len(prompt), dtype=np.int32)
    moves = shift_plan(cached, prompt, start, min_chunk)
    held = apply_moves(cells, 0, tokens, moves) if moves else start
    cells.remove(0, held, -1)  # the admission's roll-back past what is kept
    assert tokens[:held].tolist() == prompt[:held]  # the slot's tokens follow the cells
    return held, moves, cells


def edited(rng: random.Random, text: list[int]) -> list[int]:
    """`text` as an editor's next request: lines inserted, dropped, the window moved."""
    out = list(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        if rng.random() < 0.5:
            out[at:at] = [rng.randrange(50) for _ in range(rng.randint(1, 20))]
        else:
            del out[at : at + rng.randint(1, 30)]
    return out[rng.randint(0, 10):]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([1, 4, 16, 64]))
def test_the_cells_hold_the_new_prompts_first_tokens_each_at_its_position(seed, min_chunk):
    rng = random.Random(seed)
    cached = [rng.randrange(50) for _ in range(rng.randint(0, 300))]
    prompt = edited(rng, cached)
    held, moves, cells = reused(cached, prompt, min_chunk)
    assert cells.at == {p: prompt[p] for p in range(held)}
    assert all(move.length >= min_chunk and move.prompt <= move.cached for move in moves)
    for before, after in zip(moves, moves[1:]):  # back to back in the prompt, in order in the cells
        assert after.prompt == before.prompt + before.length and after.cached >= before.cached + before.length


def test_chunks_after_a_deletion_are_shifted_and_an_insertion_ends_the_reuse():
    """llama-server's walk skips cached tokens, never prompt tokens: the window's head moved and
    lines deleted are reused; from a line inserted on, the prompt is evaluated (llama.vim's new
    line: the tokens after the cursor)."""
    cached = list(range(100, 400))
    deleted = cached[3:150] + cached[160:]
    held, moves, cells = reused(cached, deleted, 16)
    assert moves == [Move(3, 0, 147), Move(160, 147, 140)]
    assert held == len(deleted) and cells.at == {p: deleted[p] for p in range(held)}
    inserted = cached[3:150] + [7] + cached[150:]
    assert reused(cached, inserted, 16)[:2] == (147, [Move(3, 0, 147)])
    # A chunk shorter than N is evaluated again, not shifted:
    assert reused(cached, deleted, 148)[1] == []


def test_control_a_plan_that_moves_a_chunk_onto_held_cells_is_caught():
    """The fake memory catches a wrong plan: a chunk moved forward lands on cells still held."""
    cells = Cells(list(range(10)))
    with pytest.raises(AssertionError, match="moved onto cells"):
        apply_moves(cells, 0, np.arange(20, dtype=np.int32), [Move(2, 5, 4)])
    assert reuse.shift_plan([1, 2, 3], [1, 2, 3], 3, 1) == []  # nothing after a whole prefix


# -- chunks from anywhere in the cached cells (reuse_plan, stage, place), new tokens between them


def plan_by_brute_force(sources, prompt, start, end, min_chunk):
    """reuse_plan's rule, read plainly: at each position the longest run of free cells any
    source holds there (the first source, then the earliest cells, on a tie), else step on."""
    free = [list(held) if held is not None else [True] * len(tokens) for tokens, _, held in sources]
    takes, p = [], start
    while p + min_chunk <= end:
        best = None
        for s, (tokens, first, _) in enumerate(sources):
            for i in range(len(tokens)):
                n = 0
                while p + n < end and i + n < len(tokens) and free[s][i + n] and tokens[i + n] == prompt[p + n]:
                    n += 1
                if n >= min_chunk and (best is None or n > best[3]):
                    best = (s, first + i, p, n)
        if best is None:
            p += 1
            continue
        s, at, to, n = best
        free[s][at - sources[s][1] : at - sources[s][1] + n] = [False] * n
        takes.append(best)
        p += n
    return takes


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([1, 3, 8, 16]))
def test_the_plan_takes_the_longest_cached_chunk_at_each_position(seed, min_chunk):
    rng = random.Random(seed)
    older = [rng.randrange(6) for _ in range(rng.randint(0, 60))]
    cached = edited(rng, older)[:60]
    prompt = edited(rng, cached + older)[:120]
    start = rng.randint(0, min(10, len(prompt)))
    held = [rng.random() < 0.9 for _ in older]
    sources = [(cached, start, None), (older, rng.randint(0, 30), held)]
    takes = reuse.reuse_plan(sources, prompt, start, len(prompt) - 1, min_chunk)
    assert [tuple(take) for take in takes] == plan_by_brute_force(sources, prompt, start, len(prompt) - 1, min_chunk)
    for take in takes:  # each chunk is the prompt's tokens, in held cells
        tokens, first, held_cells = sources[take.source]
        i = take.at - first
        assert list(tokens[i : i + take.length]) == prompt[take.to : take.to + take.length] and take.length >= min_chunk
        assert held_cells is None or all(held_cells[i : i + take.length])
    for before, after in zip(takes, takes[1:]):
        assert after.to >= before.to + before.length


class Memory:
    """llama.cpp's unified KV cache as the engine edits it: cells, each with one position, a token
    and the sequences that share it. A shift moves a cell for every sequence holding it; a decode's
    rows must go on from their sequence's last position (llama.cpp's batch check: Y = X + 1)."""

    def __init__(self, n_ctx: int = 256, n_batch: int = 32):
        self.n_ctx, self.n_batch, self.can_shift = n_ctx, n_batch, True
        self.cells: list[list] = []  # [position, token, sequences]
        self.rows: list = []
        self.evaluated = 0  # rows decoded

    def _of(self, seq, p0=-1, p1=-1):
        return [c for c in self.cells if seq in c[2] and max(p0, 0) <= c[0] < (p1 if p1 >= 0 else 1 << 62)]

    def held(self, seq) -> dict:
        return {c[0]: c[1] for c in self._of(seq)}

    def remove(self, seq, p0, p1):
        for cell in self._of(seq, p0, p1):
            cell[2].discard(seq)
        self.cells = [c for c in self.cells if c[2]]
        return True

    def roll_back(self, seq, n):
        return seq < 0 or self.remove(seq, n, -1)

    def shift(self, seq, p0, p1, delta):
        for cell in self._of(seq, p0, p1):
            cell[0] += delta
        for s in {s for c in self.cells for s in c[2]}:
            positions = [c[0] for c in self._of(s)]
            assert len(positions) == len(set(positions)), f"sequence {s} holds two cells at one position"

    def copy(self, source, target, p0=-1, p1=-1):
        for cell in self._of(source, p0, p1):
            cell[2].add(target)

    def span(self, seq):
        positions = [c[0] for c in self._of(seq)]
        return (min(positions), max(positions)) if positions else (-1, -1)

    def fill(self, rows, logits=None):
        self.rows = list(rows)

    def decode(self):
        for token, position, seqs in self.rows:
            for seq in seqs:
                last = max(self.held(seq), default=-1)
                assert position == last + 1, f"sequence {seq}: position {position} after {last}"
            self.cells.append([position, token, set(seqs)])
        self.evaluated += len(self.rows)

    def sample(self, sampler, row):
        return sampler.sample(None, row)

    def is_eog(self, token):
        return False


def editor(kept_sequence: bool = True, n_ctx: int = 256):
    """One slot (sequence 0, its branch 1, kept cells on 2) on a fake unified memory."""
    from test_engine_parts import Chains, Drafter
    from plookup.engine.admission import Admission
    from plookup.engine.slot import Cells, Slot
    from plookup.engine.step import Step
    from plookup.engine.verdicts import Verdicts
    from plookup.verify.accept import accept

    class Quiet(Drafter):  # drafts nothing, and is done with a request when it ends
        def finish(self):
            pass

    memory = Memory(n_ctx)
    slot = Slot(0, 0, 1, Cells(n_ctx), 2 if kept_sequence else -1)
    model = SimpleNamespace(drafter=Quiet(), can_roll_back=True)
    verdicts = Verdicts(memory, accept, rebuild=lambda slot, n: pytest.fail("the memory never refuses here"))
    step = Step(memory, [slot], verdicts, model)
    admission = Admission(memory, [slot], Chains(), model, step.run)
    admission.cache_reuse = 16
    return admission, memory, slot


def ask(admission, memory, prompt: list[int], max_tokens: int) -> dict:
    """A request: the model writes 900, 901, ... after the prompt; its stats once done."""
    from test_engine_parts import call

    class Writes:
        def sample(self, ctx, row):
            return 900 + memory.rows[row][1] + 1 - len(prompt)

    request = call(max_tokens=max_tokens)
    evaluated = memory.evaluated
    gen = admission.wait_for_slot(prompt, request, Writes(), randomly=False, stopping_criteria=None)
    tokens = admission.tokens(gen)
    out = [next(tokens) for _ in range(max_tokens)]
    tokens.close()
    assert out == list(range(900, 900 + max_tokens))
    assert memory.held(0) == {p: t for p, t in enumerate(prompt + out[:-1])}  # the prompt and output, in place
    assert memory.held(1) == {}  # nothing left staged
    # the prompt tokens said evaluated were, and only they (then a row for each token after the first)
    stats = request.stats.as_dict()
    assert memory.evaluated - evaluated == stats["prefill_tokens"] + max_tokens - 1
    # the cells kept are the ones recorded, each on the kept sequence alone
    kept = gen.slot.kept
    recorded = {} if kept is None else {kept.first + i: int(t) for i, t in enumerate(kept.tokens) if kept.held[i]}
    assert memory.held(2) == recorded and all(c[2] == {2} for c in memory.cells if 2 in c[2])
    return stats


PRE, SUF, MID = 1, 2, 3  # FIM's markers


def fim(extra, prefix, suffix):
    return [*extra, PRE, *prefix, SUF, *suffix, MID]


def test_llama_vims_requests_evaluate_only_their_new_tokens():
    """The other files' chunks, then the window over the file: a warm-up with a chunk more takes
    the cells after the chunks, a request whose window starts two tokens earlier than the cached
    one's evaluates those two, and the rest of both requests comes from the cells, kept or the
    slot's (llama-server's walk evaluates all of their windows: the control)."""
    rng = random.Random(0)
    text = [rng.randrange(10, 800) for _ in range(120)]
    extra, chunk = text[:30], text[30:50]
    before = fim(extra, text[50:90], text[90:110])
    admission, memory, slot = editor()
    ask(admission, memory, before, 4)
    warm_up = fim(extra + chunk, [], [])
    stats = ask(admission, memory, warm_up, 1)
    assert stats["prefill_tokens"] == len(chunk) + 3 and slot.kept is not None
    typed = [801, 802]
    after = fim(extra + chunk, text[50:90] + typed, text[90:110])
    stats = ask(admission, memory, after, 4)
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (len(typed) + 1, 40 + 1 + 20)  # + its last token
    moved = fim(extra + chunk, text[48:90] + typed, text[90:110])  # the window's head two tokens up
    stats = ask(admission, memory, moved, 4)
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (2 + 1, len(moved) - len(extra + chunk) - 2 - 2)
    # Control: llama-server's walk alone (no branch sequence to stage chunks on) evaluates the window.
    admission, memory, slot = editor()
    slot.branch_seq = -1
    ask(admission, memory, before, 4)
    ask(admission, memory, warm_up, 1)
    stats = ask(admission, memory, after, 4)
    assert stats["prefill_tokens"] == len(after) - len(extra + chunk) - 1


def test_a_chunk_that_ends_the_prompt_counts_whole_and_leaves_its_last_token_to_evaluate():
    """A key typed before llama.vim's text after the cursor: that text with its markers is 256
    tokens at most, as many as --cache-reuse 256 asks, and ends the prompt, whose last token is
    evaluated for its logits; counted whole, as llama-server counts it, the chunk is reused."""
    rng = random.Random(3)
    head, tail = [rng.randrange(10, 800) for _ in range(20)], [rng.randrange(10, 800) for _ in range(16)]
    admission, memory, slot = editor()
    ask(admission, memory, head + tail, 2)
    stats = ask(admission, memory, head + [7] + tail, 2)
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (2, 15)
    stats = ask(admission, memory, head + [7, 8] + tail[1:], 2)  # 15: short of a chunk
    assert (stats["prefill_tokens"], stats["shifted_tokens"]) == (16, 0)


def test_kept_cells_a_request_takes_part_of_keep_the_rest_where_they_were():
    """A request after the warm-up repeats the cached window's prefix but not its suffix: that
    chunk leaves the kept cells for the request's own sequence, the rest stay kept, where they
    were, for a later request to take."""
    rng = random.Random(2)
    text = [rng.randrange(10, 800) for _ in range(120)]
    extra, chunk = text[:30], text[30:50]
    admission, memory, slot = editor()
    ask(admission, memory, fim(extra, text[50:90], text[90:110]), 4)
    ask(admission, memory, fim(extra + chunk, [], []), 1)
    stats = ask(admission, memory, fim(extra + chunk, text[50:90], []), 1)
    assert stats["shifted_tokens"] == 40 + 1 and slot.kept.count == 1 + 20 + 1 + 3  # PRE, suffix, MID, output
    stats = ask(admission, memory, fim(extra + chunk, text[50:90], text[90:110]), 1)  # the prefix cached, the suffix kept
    assert stats["shifted_tokens"] == 20 and stats["prefill_tokens"] == 1


def test_kept_cells_are_given_up_where_the_request_could_outgrow_them():
    """Kept cells share the cache with the request: kept only while both, the request's tokens
    to come and a batch fit in the context, and forgotten once the memory no longer holds them."""
    rng = random.Random(1)
    text = [rng.randrange(10, 800) for _ in range(120)]
    admission, memory, slot = editor(n_ctx=256)
    ask(admission, memory, fim(text[:30], text[50:90], text[90:110]), 4)
    ask(admission, memory, fim(text[:30] + text[30:50], [], []), 1)
    assert slot.kept is not None and memory.span(2) != (-1, -1)
    # a request that may write 150 tokens: 64 + 150 + 32 + the kept 64 > 256
    ask(admission, memory, fim(text[:30] + text[30:50], [], [7]), 150)
    assert slot.kept is None and memory.span(2) == (-1, -1)
    ask(admission, memory, fim(text[:30], text[50:90], text[90:110]), 4)
    ask(admission, memory, fim(text[:30] + text[30:50], [], []), 1)
    memory.cells.clear()  # e.g. llama_cpp's reset
    slot.n = 0
    ask(admission, memory, fim(text[:30] + text[30:50], text[50:90], text[90:110]), 4)
    assert slot.kept is None
