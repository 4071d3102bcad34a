"""The engine's invariants, each checked by what a user of plookup.Llama sees (issue 40, items 2 and
3), and each with its control: the same check run with the rule broken, in this process, must fail.
tests/mutants.py plants each broken rule in a copy of the source and runs these tests against it
(docs/mutants.txt: its last result).

- a prediction is a draft source of its own, matched against the request's history, whose end is
  where the generation goes on (the prompt's end): a prompt that ends inside the predicted text
  drafts the rest of it from the first step;
- each slot drafts from its own request: two copy prompts at once each accept their own drafts;
- a step's rejected draft tokens leave the cache: every sequence's last cell is the slot's last
  token, read from llama.cpp's memory after each step (not inferred from a later decode failing);
  and so does the throwaway row an idle slot gets between two decoding ones;
- logprobs come from the row that chose each token: plain llama_cpp decoding's values, token by
  token (bitwise where the build is exact for the model, elsewhere within the batch rounding);
- a new prompt reuses the cached cells up to its first different token, not one more;
- no draft where the cost curve says none pays: a verify row costing a whole decode.

All on SmolLM2 (CPU_COST_CURVE, so that the drafts do not depend on this machine's measured curve),
with models of this module's own, and each test starts from empty slots and no past outcomes
(``Engine.forget``). Each test's control patches this process only, and undoes it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import llama_cpp
import numpy as np
import pytest

import plookup
from plookup.api.measured import NOTHING_MEASURED
from plookup.draft import index_drafter
from plookup.draft.drafters import SuffixDrafter
from plookup.draft.index_drafter import IndexDrafter
from plookup.draft.policy import CPU_COST_CURVE, DraftPolicy
from plookup.engine.slot import Slot
from plookup.verify.accept import accept

from conftest import LLAMA_KWARGS
from support.prompts import COUNT_PROMPT, COUNT_TEXT

TOKENS = 20  # COUNT_TEXT's tokens
# The whole list the prompt is the beginning of: an edit's prediction is the document being
# rewritten, and the prompt often ends inside it (a completion, a fill-in-the-middle).
WHOLE_LIST = ", ".join(str(i) for i in range(1, 31))
PARTLY_RIGHT = " 13, 14, 15, 99, 98, 16, 17, 18"  # right, wrong, right again: drafts accepted and rejected
# A verify row that costs as much as a decode of its own: no draft can beat a plain step.
LINEAR_COST = np.arange(1.0, 17.0)
# Two prompts whose answers copy them, each in its own text (alone: 28 and 26 of 32 tokens accepted).
NUMBERS = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 1, 2, 3, 4, 5, 6, 7,"
LETTERS = "a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z, a, b, c, d,"
COPIED = 32
# Two prompts that differ in one word, which decides the answer.
FRANCE = "Question: What is the capital city of France?\nAnswer: The capital city is"
ITALY = "Question: What is the capital city of Italy?\nAnswer: The capital city is"


@pytest.fixture(scope="module")
def llm(model_path):
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def two_slots(model_path):
    """No exactness probe: no test of it reads the verdict (they run in the default build, where it
    bounds no draft), and a clean machine's probe of two slots took 12 s of a test worker."""
    return plookup.Llama(model_path["smollm2"], parallel=2, **NOTHING_MEASURED, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def three_slots(model_path):
    """A flat cost curve, as on a GPU: a row on an idle slot between two decoding ones pays (one
    pass over the weights in place of two). No drafts: the decoding slots step together, a row
    each, for as many steps as they take tokens (with the flat curve's long drafts, one would run
    its whole answer ahead in a step or two). No exactness probe: nothing here reads the verdict,
    and a clean machine's probe of three slots took 14 s of a test worker."""
    return plookup.Llama(model_path["smollm2"], cost_curve=np.ones(16), max_draft=0, parallel=3, exactness=None,
                         **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def reference(model_path):
    """Plain llama_cpp decoding with logits_all: llama_cpp's only way to logprobs."""
    return llama_cpp.Llama(model_path["smollm2"], logits_all=True, **LLAMA_KWARGS)


def traced(llm, ask):
    """`ask()`'s result and the engine's records of its steps."""
    llm._engine.step.trace = []
    try:
        return ask(), llm._engine.step.trace
    finally:
        llm._engine.step.trace = None


# -- a prediction is a draft source matched against the history


def count_with_prediction(llm):
    """COUNT_PROMPT with the whole list as its prediction: (usage["speculative"], the first verify
    step's (drafted, accepted))."""
    llm._engine.forget()
    result, steps = traced(llm, lambda: llm.create_completion(COUNT_PROMPT, max_tokens=TOKENS, temperature=0.0,
                                                              prediction=WHOLE_LIST))
    assert result["choices"][0]["text"] == COUNT_TEXT
    first_verify = next(s for s in steps if s.drafted)  # the prompt's steps verify nothing
    return result["usage"]["speculative"], (first_verify.drafted[0], first_verify.accepted[0])


def prediction_never_consulted(monkeypatch, llm):
    """The control: a request's prediction never becomes a draft source (each request begins as
    one without a prediction; the drafter's warm-up, which makes a cursor of its own, is untouched)."""
    begin = index_drafter.IndexDrafter._begin
    monkeypatch.setattr(index_drafter.IndexDrafter, "_begin", lambda self, prediction: begin(self, ()))


def test_a_prediction_drafts_from_the_first_step_where_the_prompt_ends_inside_it(llm, monkeypatch):
    """The drafter drafts what followed the longest earlier match of its history's end, in the
    history or in the prediction. That end is the prompt's, where the answer goes on: "... 11, 12,"
    matches inside the predicted list, and the very first verify step drafts " 13, 14, ..." (all
    accepted: 3 or 4 forward passes for 20 tokens). With the prediction never consulted, the drafts
    come from the history alone, where only ", " repeats: the first verify step accepts nothing,
    and the answer takes a pass a token, as without the prediction."""
    stats, (drafted, accepted) = count_with_prediction(llm)
    assert drafted >= 8 and accepted == drafted, (drafted, accepted)
    assert stats["forward_passes"] <= 4, stats

    prediction_never_consulted(monkeypatch, llm)
    stats, (drafted, accepted) = count_with_prediction(llm)
    assert accepted == 0 and stats["forward_passes"] >= 6, (drafted, accepted, stats)


# -- each slot drafts from its own request


def copy_both(llm):
    """NUMBERS and LETTERS at once, from empty slots: each one's usage["speculative"] and text."""
    llm._engine.forget()
    results = llm.create_completions([NUMBERS, LETTERS], max_tokens=COPIED, temperature=0.0)
    return [(r["usage"]["speculative"], r["choices"][0]["text"]) for r in results]


def drafted_its_own_text(stats: dict) -> bool:
    return stats["accepted"] >= COPIED // 2 and stats["forward_passes"] <= COPIED // 3


def test_each_slot_drafts_from_its_own_text(two_slots, monkeypatch):
    """Two copy prompts in the same steps, each its own text: each accepts at least half its 32
    tokens, in at most a third as many passes (alone, each takes 4 to 6). A slot offered slot 0's
    draft (the control) verifies the other text's continuation, and the model rejects it."""
    llm = two_slots
    both = copy_both(llm)
    assert all(drafted_its_own_text(stats) for stats, _ in both), both
    assert [text[:8] for _, text in both] == [" 8, 9, 1", " e, f, g"]

    model_drafter = llm.drafter  # slot 0's
    monkeypatch.setattr(SuffixDrafter, "offer", lambda self, limit=None: IndexDrafter.offer(model_drafter, limit))
    both = copy_both(llm)
    assert not all(drafted_its_own_text(stats) for stats, _ in both), both


# -- a roll-back leaves no cell behind


class CellCheck(list):
    """A ``Step.trace`` that reads, as each step ends (before another decode), every slot's
    cells in llama.cpp's memory: its sequence holds positions 0..n-1 and its branch sequence none."""

    def __init__(self, llm):
        super().__init__()
        self.llm, self.kinds, self.problems = llm, Counter(), []

    def append(self, record) -> None:
        super().append(record)
        for drafted, accepted in zip(record.drafted, record.accepted):
            if drafted:
                self.kinds["all accepted" if accepted == drafted else "part rejected"] += 1
        memory = self.llm._engine.context.memory
        for slot in self.llm._engine.slots:
            cells = (llama_cpp.llama_memory_seq_pos_min(memory, slot.seq),
                     llama_cpp.llama_memory_seq_pos_max(memory, slot.seq))
            if cells != ((0, slot.n - 1) if slot.n else (-1, -1)):
                self.problems.append(f"step {len(self)}, slot {slot.index}: cells {cells}, n = {slot.n}")
            if slot.branch_seq >= 0 and llama_cpp.llama_memory_seq_pos_max(memory, slot.branch_seq) != -1:
                self.problems.append(f"step {len(self)}, slot {slot.index}: cells left on the branch sequence")


def cells_after_rejections(llm) -> CellCheck:
    llm._engine.forget()
    llm._engine.step.trace = check = CellCheck(llm)
    try:
        llm.create_completion(COUNT_PROMPT, max_tokens=TOKENS, temperature=0.0, prediction=PARTLY_RIGHT)
    except RuntimeError as e:  # (a broken cache may fail a later decode: the check has spoken by then)
        check.problems.append(f"the generation failed: {e}")
    finally:
        llm._engine.step.trace = None
    return check


def test_a_step_with_rejected_draft_tokens_leaves_no_cell_behind(llm, monkeypatch):
    """After every step, llama.cpp's memory holds each slot's tokens[:n] and nothing more; here
    with steps whose drafts were partly rejected. The control keeps one cell too many at every
    roll-back: seen at the first such step, not when a later decode fails."""
    check = cells_after_rejections(llm)
    assert check.problems == []
    assert check.kinds["part rejected"] >= 1 and check.kinds["all accepted"] >= 1, check.kinds

    roll_back = llm._engine.context.roll_back
    monkeypatch.setattr(llm._engine.context, "roll_back", lambda seq, n: roll_back(seq, n + 1 if n > 0 else n))
    try:
        check = cells_after_rejections(llm)
    finally:
        monkeypatch.undo()
        llm._engine.forget()
    assert check.problems and check.problems[0].startswith("step"), check.problems


def outer_slots_decoding(llm) -> CellCheck:
    """Slots 0 and 2 decoding while slot 1, its request closed, keeps its cells."""
    engine = llm._engine
    engine.forget()  # every slot empty: each request takes the lowest free one
    engine.step.trace = check = CellCheck(llm)
    generations = []
    try:
        for prompt in (NUMBERS, FRANCE, LETTERS):  # on slots 0, 1 and 2
            generations.append(llm.generate(llm.tokenize(prompt.encode()), temp=0.0))
            next(generations[-1])
        assert [slot.generation is not None for slot in engine.slots] == [True, True, True]
        first, middle, third = generations
        middle.close()
        for _ in range(16):
            next(first)
            next(third)
    except RuntimeError as e:
        check.problems.append(f"a generation failed: {e}")
    finally:
        for generation in generations:  # (one left open would be given back when collected, maybe after its model)
            generation.close()
        engine.step.trace = None
    return check


def test_an_idle_slots_throwaway_row_leaves_its_cells(three_slots, monkeypatch):
    """With a KV stream per slot, an idle slot between two decoding ones gets a throwaway row
    behind its cells (a filler, :meth:`plookup.engine.step.Step._fillers`), dropped after the
    decode: its cells are what its request left, read after every step. The control keeps the
    row."""
    check = outer_slots_decoding(three_slots)
    filled = [r for r in check if len(r.drafted) == 2 and not r.prefilled and r.rows > sum(d + 1 for d in r.drafted)]
    assert check.problems == [] and filled, (check.problems, len(filled))

    engine = three_slots._engine
    roll_back = engine.context.roll_back
    idle = lambda seq: seq < len(engine.slots) and engine.slots[seq].generation is None  # noqa: E731
    monkeypatch.setattr(engine.context, "roll_back", lambda seq, n: roll_back(seq, n + 1 if n > 0 and idle(seq) else n))
    try:
        check = outer_slots_decoding(three_slots)
    finally:
        monkeypatch.undo()
        engine.forget()
    assert check.problems and check.problems[0].startswith("step") and "slot 1" in check.problems[0], check.problems


# -- logprobs from the row that chose each token

TOP = 3
# |Δlogprob| against plain decoding where the build is not exact: a logprob is a logit less the
# row's log-sum-exp, so batch rounding moves it by at most twice the largest logit difference it
# makes (plookup doctor, SmolLM2 Q4_1, default build: 0.62).
BOUND = 1.3


def logprobs(llm, **kwargs) -> dict:
    return llm.create_completion(COUNT_PROMPT, max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0, logprobs=TOP,
                                 **kwargs)["choices"][0]["logprobs"]


def token_differences(got: dict, plain: dict) -> list[tuple[float, bool]]:
    """Per token of both listings (which must be the same tokens): the largest |Δlogprob| of the
    token's own value and of the alternatives both list; and whether both rows' most likely token
    is the same (greedy decoding's: the token itself)."""
    assert got["tokens"] == plain["tokens"]
    differences = []
    for value, theirs, mine, top in zip(got["token_logprobs"], plain["token_logprobs"], got["top_logprobs"],
                                        plain["top_logprobs"], strict=True):
        largest = max([abs(value - theirs)] + [abs(mine[t] - top[t]) for t in mine.keys() & top.keys()])
        differences.append((largest, max(mine, key=mine.get) == max(top, key=top.get)))
    return differences


def one_row_late(draft, sample, stop=None, branch=None):
    """The acceptance rule with a bug in the rows it reports: each token's row is the next one
    (the step's last row for its last token, so that nothing reads past a step's rows)."""
    verdict = accept(draft, sample, stop, branch)
    return dataclasses.replace(verdict, rows=tuple(min(row + 1, len(draft)) for row in verdict.rows))


@pytest.mark.exact_build  # bitwise there, within the batch rounding elsewhere
def test_logprobs_are_plain_decodings_token_by_token(llm, reference, monkeypatch):
    """Each emitted token's logprobs, with drafts accepted and rejected, against plain llama_cpp
    decoding's with logits_all: the same tokens, each row's most likely token the same, and the
    values within the batch rounding (measured here: 0.21 at most; bitwise where the build is
    exact for the model). A row one late (the control) is the next token's distribution: its most
    likely token is another, and the values move by 5 to 18."""
    plain = reference.create_completion(COUNT_PROMPT, max_tokens=TOKENS, temperature=0.0, repeat_penalty=1.0,
                                        logprobs=TOP)["choices"][0]["logprobs"]
    llm._engine.forget()
    got = logprobs(llm, prediction=PARTLY_RIGHT)
    stats = llm.last_stats
    assert stats.accepted > 0 and stats.drafted > stats.accepted  # drafts accepted and rejected
    if llm.exact:
        assert got == plain
    differences = token_differences(got, plain)
    print(f"max |Δlogprob| vs plain: {max(d for d, _ in differences):.3g}")
    assert all(same for _, same in differences) and max(d for d, _ in differences) <= BOUND, differences

    monkeypatch.setattr(llm._engine.verdicts, "accept", one_row_late)
    late = token_differences(logprobs(llm, prediction=PARTLY_RIGHT), plain)
    assert not all(same for _, same in late) and max(d for d, _ in late) > 3 * BOUND, late


# -- a cached prefix, and not one token more


def italy_after_france(llm) -> tuple[str, int, int]:
    """ITALY's answer and prefill on the slot FRANCE's request left, and how many tokens they share."""
    llm._engine.forget()
    llm.create_completion(FRANCE, max_tokens=4, temperature=0.0)
    result = llm.create_completion(ITALY, max_tokens=4, temperature=0.0)
    france, italy = llm.tokenize(FRANCE.encode()), llm.tokenize(ITALY.encode())
    shared = next(i for i, (a, b) in enumerate(zip(france, italy)) if a != b)
    return result["choices"][0]["text"], result["usage"]["speculative"]["prefill_tokens"], len(italy) - shared


def test_a_prompt_reuses_the_cache_up_to_its_first_different_token(llm, monkeypatch):
    """A prompt that differs from the cached one in a word reuses the cells before that word and
    prefills the rest, and one sent again all but its last token; its answer is its own. The
    control reuses one cell more: the cached " France" stays where the prompt says " Italy", and
    the answer is France's."""
    llm._engine.forget()
    alone = llm.create_completion(ITALY, max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert alone.startswith(" Rome")
    text, prefilled, after_shared = italy_after_france(llm)
    assert (text, prefilled) == (alone, after_shared)
    # The same prompt again: all of it is cached, but the last token's row is gone with the
    # decode that made it, so that token alone is decoded again.
    again = llm.create_completion(ITALY, max_tokens=4, temperature=0.0)
    assert (again["choices"][0]["text"], again["usage"]["speculative"]["prefill_tokens"]) == (alone, 1)

    shared_prefix = Slot.shared_prefix
    one_more = lambda slot, prompt: min(shared_prefix(slot, prompt) + 1, slot.n, len(prompt))  # noqa: E731
    monkeypatch.setattr(Slot, "shared_prefix", one_more)
    text, _, _ = italy_after_france(llm)
    assert text != alone and text.startswith(" Paris")


# -- drafts only where they pay


def test_no_draft_where_a_verify_row_costs_a_whole_decode(llm, two_slots, monkeypatch):
    """With a cost curve on which no draft can pay (each row as dear as a decode), plookup decodes
    as plain decoding does: one token a forward pass, nothing drafted, alone and with two slots;
    though the same requests draft on the CPU curve (the other tests here). The control drafts
    what the index offers, whatever it costs."""

    def linear_curve_runs():
        saved = llm.drafter.policy.cost, two_slots.drafter.policy.cost
        llm.drafter.use_cost_curve(LINEAR_COST)
        two_slots.drafter.use_cost_curve(LINEAR_COST)
        try:
            lone = count_with_prediction(llm)[0]
            both = [stats for stats, _ in copy_both(two_slots)]
        finally:
            llm.drafter.use_cost_curve(saved[0])
            two_slots.drafter.use_cost_curve(saved[1])
        return [lone, *both]

    for stats in linear_curve_runs():
        assert stats["drafted"] == 0 and stats["forward_passes"] == stats["generated"], stats

    uncut = lambda policy, length, agree, source=None: len(agree) if length >= policy.min_match else 0  # noqa: E731
    monkeypatch.setattr(DraftPolicy, "choose", uncut)
    assert linear_curve_runs()[0]["drafted"] > 0
