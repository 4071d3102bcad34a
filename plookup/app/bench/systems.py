"""The decoders `plookup bench` compares, each behind one call: ``run(prompt, max_tokens) -> dict``.

Every in-process system runs in a worker process of its own, so that its peak RSS is its own and
one system's buffers (PLD's logits_all holds n_ctx x n_vocab floats) do not weigh on another's.
Only one worker computes at a time: the parent waits for each run.

A run's record: the generated tokens (stopping after end-of-generation, which is included, as in
plookup.app.bench.plain.greedy_with_gaps), prefill / first-token / end-to-end seconds, the SpecStats fields,
and the process's peak RSS in MiB.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
import traceback
from typing import Sequence

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from ...api.context import is_eog
from ...api.stats import SpecStats
from ...index.memory import GlobalMemory
from ...measure.clock import DecodeClock
from ..options import plain_llama
from .host import host_record
from .replay import score_drafts

IN_PROCESS_SYSTEMS = ("plain", "pld", "plookup-suffix", "plookup-ngram")
# The suffix drafter with a cross-request memory read from a file (`plookup bench --memory PATH`).
MEMORY_SYSTEM = "plookup-memory"
# The suffix drafter with a memory that every request joins, as `plookup serve` runs by default:
# a repeat drafts from the earlier run's answer, as llama-server's ngram-mod pool does.
LIVE_MEMORY_SYSTEM = "plookup-live-memory"
# The suffix drafter with a corpus index read from a file (`plookup bench --corpus FILE`).
CORPUS_SYSTEM = "plookup-corpus"
# The suffix drafter with greedy rows sampled on the backend (plookup.verify.backend), whatever
# --backend-sampling or the doctor chose for the others.
BACKEND_SYSTEM = "plookup-backend"
PLOOKUP_DRAFTERS = {
    "plookup-suffix": "suffix", "plookup-ngram": "ngram", MEMORY_SYSTEM: "suffix", LIVE_MEMORY_SYSTEM: "suffix",
    CORPUS_SYSTEM: "suffix", BACKEND_SYSTEM: "suffix",
}
# llama_cpp's prompt-lookup drafter proposes this many tokens (its own default).
PLD_DRAFT_TOKENS = 10
WARM_UP_PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class RecordingDrafter:
    """Wraps a llama_cpp draft model, recording each draft and the output index it predicts."""

    def __init__(self, inner):
        self.inner = inner
        self.prompt_length = 0
        self.drafts: list[tuple[int, list[int]]] = []
        self.seconds = 0.0

    def start(self, prompt_length: int) -> None:
        self.prompt_length, self.drafts, self.seconds = prompt_length, [], 0.0

    def __call__(self, input_ids, /, **kwargs):
        start = time.perf_counter()
        draft = self.inner(input_ids, **kwargs)
        self.seconds += time.perf_counter() - start
        self.drafts.append((len(input_ids) - self.prompt_length, draft.tolist()))
        return draft


class LocalSystem:
    """A llama_cpp.Llama (or plookup.Llama) decoding in this process, greedily at temperature 0.

    At temperature > 0 the n-th run of every system uses seed n, so repeats differ from each other
    while each repeat gives all systems the same seed.
    """

    def __init__(self, name: str, llm: llama_cpp.Llama, temperature: float = 0.0):
        self.name = name
        self.llm = llm
        self.temperature = temperature
        self.runs = 0
        self.clock = DecodeClock(llm)

    def run(self, prompt: Sequence[int], max_tokens: int) -> dict:
        llm, prompt = self.llm, list(prompt)
        recorder = llm.draft_model if isinstance(llm.draft_model, RecordingDrafter) else None
        if recorder:
            recorder.start(len(prompt))
        llm.reset()  # a cold prefill every run: no prompt reuse across repeats
        self.runs += 1
        llm.set_seed(self.runs)
        start = time.perf_counter()
        # Prefill timed on its own: generate() then finds all but the last prompt token cached
        # (plookup.Llama's prefill keeps a backend sampler's chains attached, eval would not).
        if hasattr(llm, "prefill"):
            llm.prefill(prompt, temp=self.temperature, repeat_penalty=1.0)
        else:
            llm.eval(prompt[:-1])
        prefill = time.perf_counter() - start
        self.clock.reset()
        tokens: list[int] = []
        first = None
        generator = llm.generate(prompt, temp=self.temperature, repeat_penalty=1.0)
        try:
            for token in generator:
                if first is None:
                    first = time.perf_counter() - start
                tokens.append(token)
                if is_eog(llm, token) or len(tokens) >= max_tokens:
                    break
            total = time.perf_counter() - start
        finally:
            generator.close()
        if recorder:
            stats = score_drafts(recorder.drafts, tokens)
            stats.draft_seconds = recorder.seconds
        elif isinstance(getattr(llm, "last_stats", None), SpecStats):
            stats = llm.last_stats
        else:
            stats = SpecStats(forward_passes=len(tokens), generated=len(tokens))
        record = run_record(tokens, prefill, first if first is not None else total, total, stats, peak_rss_mib())
        return dict(record, **host_record(total - prefill, self.clock, stats))


def run_record(tokens, prefill_s, ttft_s, total_s, stats: SpecStats, rss_mib) -> dict:
    spec = stats.as_dict()
    spec["generated"] = len(tokens)  # what the caller kept, not what the decoder produced ahead
    return dict(tokens=list(tokens), prefill_s=prefill_s, ttft_s=ttft_s, total_s=total_s,
                peak_rss_mib=rss_mib, **spec)


class FrozenMemory(GlobalMemory):
    """A memory the benchmark only reads: the requests it runs are not added, so every repeat and
    workload drafts from the file's memory alone, never from an earlier run of the same prompt."""

    def add(self, tokens) -> None:
        pass


def frozen_memory(path: str | None, model_path: str) -> FrozenMemory:
    from ..options import model_vocabulary

    if path is None:
        raise ValueError(f"{MEMORY_SYSTEM} drafts from a memory file: give it with --memory PATH")
    return FrozenMemory.load(path, model_vocabulary(model_path))


def build_local(
    name: str, model_kwargs: dict, max_draft: int, temperature: float = 0.0, memory_path: str | None = None,
    corpus_path: str | None = None,
) -> LocalSystem:
    if name == "plain":
        return LocalSystem(name, plain_llama(model_kwargs), temperature)
    if name == "pld":
        drafter = RecordingDrafter(LlamaPromptLookupDecoding(num_pred_tokens=PLD_DRAFT_TOKENS))
        # llama_cpp's speculative path reads every position's logits from its scores array.
        return LocalSystem(name, plain_llama(model_kwargs, draft_model=drafter, logits_all=True), temperature)
    if name in PLOOKUP_DRAFTERS:
        from ...api.llama import Llama
        from ...draft.drafters import make_drafter

        memory = None
        if name == MEMORY_SYSTEM:
            memory = frozen_memory(memory_path, model_kwargs["model_path"])
        elif name == LIVE_MEMORY_SYSTEM:
            memory = GlobalMemory()  # serve's default bound
        if name == CORPUS_SYSTEM and corpus_path is None:
            raise ValueError(f"{CORPUS_SYSTEM} drafts from a corpus index: give it with --corpus FILE")
        drafter = make_drafter(PLOOKUP_DRAFTERS[name], max_draft, memory)
        corpus = corpus_path if name == CORPUS_SYSTEM else None
        kwargs = dict(model_kwargs, backend_sampling=True) if name == BACKEND_SYSTEM else model_kwargs
        return LocalSystem(name, Llama(drafter=drafter, corpus=corpus, **kwargs), temperature)
    known = (*IN_PROCESS_SYSTEMS, MEMORY_SYSTEM, LIVE_MEMORY_SYSTEM, CORPUS_SYSTEM, BACKEND_SYSTEM)
    raise ValueError(f"unknown system {name!r}; known: {', '.join(known)}")


def _serve(conn, name: str, model_kwargs: dict, max_draft: int, temperature: float, memory_path, corpus_path) -> None:
    """Worker process: build the system, warm it up, then run prompts until told to stop."""
    try:
        system = build_local(name, model_kwargs, max_draft, temperature, memory_path, corpus_path)
        system.run(WARM_UP_PROMPT, 8)  # first graph builds and kernel loads happen here
        conn.send(("ready", None))
    except Exception:  # reported to the parent with its traceback, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    while (request := conn.recv()) is not None:
        try:
            conn.send(("ok", system.run(*request)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class WorkerSystem:
    """A LocalSystem in a process of its own."""

    def __init__(
        self, name: str, model_kwargs: dict, max_draft: int, temperature: float = 0.0, memory_path: str | None = None,
        corpus_path: str | None = None,
    ):
        self.name = name
        context = multiprocessing.get_context("spawn")  # no inherited llama.cpp threads or state
        self._conn, child = context.Pipe()
        args = (child, name, model_kwargs, max_draft, temperature, memory_path, corpus_path)
        self._process = context.Process(target=_serve, args=args, daemon=True)
        self._process.start()
        self._reply()

    def _reply(self):
        status, value = self._conn.recv()
        if status == "error":
            raise RuntimeError(f"{self.name}: {value}")
        return value

    def run(self, prompt: Sequence[int], max_tokens: int) -> dict:
        self._conn.send((list(map(int, prompt)), max_tokens))
        return self._reply()

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(None)
            self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
