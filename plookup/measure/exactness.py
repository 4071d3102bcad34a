"""Is verification exact here? Batch invariance of this model, build and runtime settings, measured.

A verify batch is exact when the logits of each of its rows are bitwise equal to what single-token
decoding computes at that position. Then greedy speculative decoding gives plain decoding's text
token for token, and sampling draws from the very same distributions. llama.cpp promises no such
thing: for a batch, some kernels take other code paths that round differently. Found in this
llama.cpp (x86, AVX2):

- llamafile's tinyBLAS, for batches of Q8_0, Q4_0, Q5_0 and F16 weights (the build flag
  ``-DGGML_LLAMAFILE=OFF`` turns it off: ``make EXACT=1``);
- the "tiled" K-quant kernel, for batches of 8 or more tokens on q4_K/q5_K/q6_K/... weights that are
  not repacked (``GGML_CPU_TILED_MM=0`` in the environment turns it off; ggml reads it once per
  process, at the first matrix product);
- weight repacking (``llama_model_params.use_extra_bufts``): the repacked q4_K gemm used for
  batches of 4 or more rounds per sub-block, its gemv once per block.

:func:`probe_invariance` measures it on a loaded model in plookup's own context (two sequences,
unified KV): rows of single-draft verify batches of the cost curve's sizes (every n = 2..17, then
sparser up to the longest draft plus one) and of two-branch ones of n = 4..16 tokens against
single-token decodes of the same tokens. :func:`cached_invariance` keeps the verdict per model,
build and settings, like :mod:`plookup.measure.costs` keeps the cost curve. ``plookup doctor``
(:mod:`plookup.app.doctor`) measures every setting in a process of its own and saves a report here;
:func:`recommended_settings` reads it back for plookup.Llama, and :func:`advise` turns the figures
into plain words.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Optional

import llama_cpp
import llama_cpp._internals as internals
import llama_cpp.llama_cpp as llama_cpp_lib
import numpy as np

from ..draft.values import Branch
from ..verify.greedy import logits_row
from ..verify.rows import decode_chunks, fill, sequence_rows, verify_rows
from .cache import cache_path, digest, keep, measured_once, read_cached
from .costs import DEFAULT_MAX_N, context_limit, curve_key, curve_sizes

TILED_ENV = "GGML_CPU_TILED_MM"
# Two-branch batches are probed up to this size: plookup verifies a second branch only where
# verification is not exact, so their rows are reported, never required.
BRANCH_MAX_N = 16
# Verification is called exact when every single-draft batch up to this many rows is (drafts of
# 16, the bound before drafts grew longer); drafts are then kept within the sizes found exact.
EXACT_MIN_ROWS = 17
CONTEXT_TOKENS = 256  # verify batches run behind a context; attention over it is part of the check
FORK_AT = 1  # the probe's two-branch batches part after pending + one shared draft token
LOCKSTEP = 32  # the slot probe's context tokens decoded a row of each sequence at a time


@dataclass(frozen=True)
class Settings:
    """The runtime settings that change which kernels a verify batch runs."""

    repack: bool = True  # llama_model_params.use_extra_bufts
    tiled: bool = True  # GGML_CPU_TILED_MM
    flash_attn: bool = False

    def label(self) -> str:
        off = [name for name, on in (("repacking", self.repack), ("tiled K-quant kernel", self.tiled)) if not on]
        parts = ["flash attention on" if self.flash_attn else "flash attention off"]
        parts += [f"{name} off" for name in off]
        return ", ".join(parts)


# What `plookup doctor` measures: llama_cpp's defaults first.
SETTINGS_TO_PROBE = (
    Settings(),
    Settings(flash_attn=True),
    Settings(repack=False),
    Settings(tiled=False),
    Settings(repack=False, tiled=False),
)


def tiled_from_environment() -> bool:
    value = os.environ.get(TILED_ENV)
    return value is None or value.strip() not in ("0",)


@contextlib.contextmanager
def model_params(repack: bool, devices: Optional[int] = None) -> Iterator[None]:
    """Load models with ``use_extra_bufts = repack`` inside the block, and with `devices` (the
    address of a NULL-terminated ggml_backend_dev_t array, see plookup.api.rpc) when given
    (llama_cpp.Llama builds its llama_model_params from llama_model_default_params() and has no
    argument for either field)."""
    original = llama_cpp_lib.llama_model_default_params

    def patched():
        params = original()
        params.use_extra_bufts = repack
        if devices is not None:
            params.devices = devices
        return params

    llama_cpp_lib.llama_model_default_params = patched
    try:
        yield
    finally:
        llama_cpp_lib.llama_model_default_params = original


LLAMAFILE_FLAG = "LLAMAFILE = 1 | "  # in llama.cpp's system info when built with llamafile


def llamafile_in_build() -> bool:
    return LLAMAFILE_FLAG in llama_cpp.llama_print_system_info().decode()


# -- the probe


@dataclass
class RowCheck:
    n: int  # tokens in the verify batch
    two_branch: bool
    equal: int  # rows bitwise equal to single-token decoding
    rows: int
    max_delta: float  # max |logit difference| over the batch's rows


@dataclass
class Invariance:
    checks: list[RowCheck] = field(default_factory=list)

    @property
    def single_invariant(self) -> bool:
        """Single-draft verify batches are bitwise equal to single-token decoding."""
        singles = [c for c in self.checks if not c.two_branch]
        return bool(singles) and all(c.equal == c.rows for c in singles)

    @property
    def exact_rows(self) -> int:
        """The largest probed batch size n such that every single-draft batch of up to n rows
        was bitwise single-token decoding (1: not even the smallest)."""
        rows = 1
        for check in sorted((c for c in self.checks if not c.two_branch), key=lambda c: c.n):
            if check.equal != check.rows:
                break
            rows = check.n
        return rows

    def exact_within(self, max_rows: int) -> Optional[int]:
        """The largest verify batch (rows) that keeps verification exact for drafts of up to
        max_rows - 1 tokens: None where batches of EXACT_MIN_ROWS (or max_rows, if fewer) are not."""
        rows = self.exact_rows
        return min(rows, max_rows) if rows >= min(EXACT_MIN_ROWS, max_rows) else None

    def rows(self, two_branch: bool) -> tuple[int, int]:
        """(rows bitwise equal, rows) over the single-draft or the two-branch batches."""
        checks = [c for c in self.checks if c.two_branch == two_branch]
        return sum(c.equal for c in checks), sum(c.rows for c in checks)

    def summary(self) -> str:
        parts = []
        for name, branch in (("single", False), ("two-branch", True)):
            checks = [c for c in self.checks if c.two_branch == branch]
            worst = max((c.max_delta for c in checks), default=0.0)
            parts.append(f"{name} {sum(c.equal for c in checks)}/{sum(c.rows for c in checks)} rows"
                         + (f" (max |Δ| {worst:.2g})" if worst else ""))
        if not self.single_invariant:
            parts.append(f"single-draft batches exact up to {self.exact_rows} rows")
        return ", ".join(parts)


def _logits(llm, row: int) -> np.ndarray:
    """A copy of batch row `row`'s logits of the model (or of a decoder with the model's context)."""
    return logits_row(llm._ctx, row, llm.n_vocab()).copy()


def _single_decodes(llm, tokens, n_past: int) -> list[np.ndarray]:
    """Logits after each of `tokens`, decoded one at a time from n_past on; the cache is left
    holding only the first n_past positions again."""
    out = []
    for i, token in enumerate(tokens):
        fill(llm, sequence_rows([token], n_past + i))
        llm._ctx.decode(llm._batch)
        out.append(_logits(llm, 0))
    llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
    return out


def _compare(batch_rows: list[np.ndarray], reference: list[np.ndarray]) -> tuple[int, float]:
    equal = sum(np.array_equal(a, b) for a, b in zip(batch_rows, reference))
    delta = max(float(np.max(np.abs(a - b))) for a, b in zip(batch_rows, reference))
    return equal, delta


def probe_invariance(llm, max_n: int = DEFAULT_MAX_N) -> Invariance:
    """Rows of verify batches of the curve's sizes of 2..max_n tokens against single-token
    decoding, behind a context of random tokens, on sequence 0 alone and (up to BRANCH_MAX_N
    tokens) as two branches on sequences 0 and 1.

    `llm` is a plookup.Llama. Leaves it reset. The two-branch checks need the branch's sequence in
    the cache the first one is in: a context with a KV stream per sequence (several slots) has no
    such sequence, and llama.cpp refuses a row on two streams, so there only single drafts are probed.
    """
    branches = _unified(llm)
    limit = context_limit(llm)
    max_n = max(2, min(max_n, llm.n_batch, limit // 2))
    n_context = max(0, min(CONTEXT_TOKENS, limit - 2 * max_n))
    rng = np.random.default_rng(0)
    tokens = rng.integers(100, llm.n_vocab(), n_context + 2 * max_n).tolist()
    context, path = tokens[:n_context], tokens[n_context : n_context + max_n]
    fork = path[: FORK_AT + 1] + tokens[n_context + max_n + FORK_AT + 1 :][: BRANCH_MAX_N - FORK_AT - 1]
    memory = llm._ctx.memory
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(context)
    single = _single_decodes(llm, path, n_context)
    single_fork = _single_decodes(llm, fork, n_context)
    result = Invariance()
    for n in curve_sizes(max_n)[1:]:
        fill(llm, verify_rows(path[0], path[1:n], None, n_context))
        llm._ctx.decode(llm._batch)
        equal, delta = _compare([_logits(llm, r) for r in range(n)], single[:n])
        result.checks.append(RowCheck(n, False, equal, n, delta))
        llm._ctx.kv_cache_seq_rm(-1, n_context, -1)
        if branches and FORK_AT + 3 <= n <= BRANCH_MAX_N:  # pending, the shared token, and one token on each branch
            on_draft = (n - FORK_AT - 1 + 1) // 2
            on_branch = n - FORK_AT - 1 - on_draft
            draft = path[1 : FORK_AT + 1 + on_draft]
            branch = Branch(FORK_AT, np.array(fork[FORK_AT + 1 : FORK_AT + 1 + on_branch]))
            llama_cpp.llama_memory_seq_cp(memory, 0, 1, -1, -1)
            fill(llm, verify_rows(path[0], draft, branch, n_context))
            llm._ctx.decode(llm._batch)
            rows = [_logits(llm, r) for r in range(n)]
            reference = single[: FORK_AT + 1 + on_draft] + single_fork[FORK_AT + 1 : FORK_AT + 1 + on_branch]
            equal, delta = _compare(rows, reference)
            result.checks.append(RowCheck(n, True, equal, n, delta))
            llama_cpp.llama_memory_seq_rm(memory, 1, -1, -1)
            llm._ctx.kv_cache_seq_rm(-1, n_context, -1)
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm._requires_eval = True
    return result


@dataclass
class SlotCheck:
    """Rows of one sequence in a batch that also carries another sequence's rows, against that
    sequence decoded alone (plain llama_cpp: one sequence in the cache, one token a decode)."""

    layout: str  # "unified" (one cache the sequences share) or "streams" (a stream per sequence)
    n: int  # the sequence's rows in the batch (pending + draft)
    equal: int
    rows: int
    max_delta: float


class _Decoder:
    """A context of its own over `llm`'s model, and a batch: what :func:`plookup.verify.rows.fill`
    fills (it needs a ``_batch``)."""

    def __init__(self, llm, n_seq: int, unified: bool, n_ctx: int):
        params = llama_cpp.llama_context_default_params()
        for name in ("n_threads", "n_threads_batch", "n_batch", "n_ubatch", "flash_attn_type", "type_k", "type_v"):
            setattr(params, name, getattr(llm.context_params, name))
        params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, n_seq, unified
        self.llm = llm
        self._ctx = internals.LlamaContext(model=llm._model, params=params, verbose=False)
        self._batch = internals.LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=n_seq, verbose=False)

    def decode(self, rows, logits=None) -> None:
        fill(self, rows, logits)
        self._ctx.decode(self._batch)

    def prefill(self, tokens, seq: int) -> None:
        decode_chunks(self, tokens, seq, self.llm.n_batch)

    def logits(self, row: int) -> np.ndarray:
        return logits_row(self._ctx, row, self.llm.n_vocab()).copy()

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()


def probe_slots(llm, max_n: int = DEFAULT_MAX_N, context_tokens: int = CONTEXT_TOKENS) -> list[SlotCheck]:
    """Is a slot's verify batch, decoded beside another slot's rows, what its sequence decoded
    alone gives? Two sequences behind contexts of their own, the first half of each prefilled
    alone and the last LOCKSTEP tokens decoded in lockstep (a row of each per decode, so their
    cells interleave as running slots' do); then for n of the curve's sizes up to max_n, n rows of sequence 0 beside n rows of
    sequence 1, in a unified cache and in a stream per sequence, each row against single-token
    decodes of sequence 0 in a cache that holds it alone."""
    rng = np.random.default_rng(2)
    max_n = max(1, min(max_n, llm.n_batch // 2))  # n rows beside as many fill one batch
    limit = context_limit(llm)
    n_context = max(2, min(context_tokens, limit // 2 - max_n))
    half = max(1, n_context - LOCKSTEP)
    a = rng.integers(100, llm.n_vocab(), n_context + max_n).tolist()
    b = rng.integers(100, llm.n_vocab(), n_context + max_n).tolist()
    alone = _Decoder(llm, 1, True, 2 * (n_context + max_n))
    try:
        alone.prefill(a[:half], 0)
        for i in range(half, n_context):
            alone.decode(sequence_rows([a[i]], i, 0))
        reference = []
        for i, token in enumerate(a[n_context:]):
            alone.decode(sequence_rows([token], n_context + i, 0))
            reference.append(alone.logits(0))
    finally:
        alone.close()
    checks = []
    for layout in ("unified", "streams"):
        # A stream per sequence splits n_ctx between them: give each room for its context.
        pair = _Decoder(llm, 2, layout == "unified", 4 * (n_context + max_n))
        try:
            pair.prefill(a[:half], 0)
            pair.prefill(b[:half], 1)
            for i in range(half, n_context):
                pair.decode(sequence_rows([a[i]], i, 0) + sequence_rows([b[i]], i, 1))
            memory = pair._ctx.memory
            # Beside as many rows of the other sequence, and beside one (uneven drafts).
            for n, m in [(n, m) for n in curve_sizes(max_n) for m in sorted({1, n})]:
                rows = sequence_rows(a[n_context : n_context + n], n_context, 0)
                rows += sequence_rows(b[n_context : n_context + m], n_context, 1)
                pair.decode(rows)
                got = [pair.logits(r) for r in range(n)]
                equal, delta = _compare(got, reference[:n])
                checks.append(SlotCheck(layout, n, equal, n, delta))
                for seq in (0, 1):
                    llama_cpp.llama_memory_seq_rm(memory, seq, n_context, -1)
        finally:
            pair.close()
    return checks


def slots_exact(checks: list[SlotCheck], layout: str) -> bool:
    """Every probed row of a slot beside another slot's was bitwise its lone decode, in `layout`."""
    mine = [c for c in checks if c.layout == layout]
    return bool(mine) and all(c.equal == c.rows for c in mine)


def _unified(llm) -> bool:
    """Whether `llm`'s sequences share one KV cache (else each has a stream of its own)."""
    return bool(llm.context_params.kv_unified)


def _probe_path(llm, max_n: int, kind: str):
    tiled = "tiled" if tiled_from_environment() else "untiled"
    return cache_path("invariance", f"{curve_key(llm, max_n)}-{tiled}{kind}")


def cached_slot_invariance(llm, max_n: int = DEFAULT_MAX_N) -> list[SlotCheck]:
    """:func:`probe_slots` for `llm`, from the cache or measured now (seconds), keyed as
    :func:`cached_invariance` is."""
    return measured_once(
        _probe_path(llm, max_n, "-slots"), "slot invariance",
        parse=lambda data: [SlotCheck(**c) for c in data["checks"]],
        measure=lambda: probe_slots(llm, max_n),
        serialize=lambda checks: {"model": llm.model_path, "checks": [asdict(c) for c in checks]},
    )


def cached_invariance(llm, max_n: int = DEFAULT_MAX_N) -> Invariance:
    """:func:`probe_invariance` for `llm` up to max_n rows, from the cache or measured now (seconds
    for a small model; leaves `llm` reset). Keyed like the cost curve, plus the tiled switch."""
    return measured_once(
        # keyed by the layout too: rows in a stream of their own may round otherwise
        _probe_path(llm, max_n, "" if _unified(llm) else "-streams"), "invariance",
        parse=lambda data: Invariance([RowCheck(**c) for c in data["checks"]]),
        measure=lambda: probe_invariance(llm, max_n),
        serialize=lambda result: {"model": llm.model_path, "checks": [asdict(c) for c in result.checks]},
    )


# -- what the doctor measured, kept per model and build: plookup.Llama reads the settings from it


def report_path(model_path: str, llamafile: Optional[bool] = None):
    """Where `plookup doctor`'s report for this model file and build is kept: this process's
    build, or the same one with (or without) llamafile, the difference `make EXACT=1` makes."""
    stat = os.stat(model_path)
    features = llama_cpp.llama_print_system_info().decode().replace(LLAMAFILE_FLAG, "")
    llamafile = llamafile_in_build() if llamafile is None else llamafile
    key = [os.path.abspath(model_path), stat.st_size, stat.st_mtime_ns, llama_cpp.__version__, features, llamafile]
    return cache_path("doctor", digest(key))


def load_report(model_path: str, llamafile: Optional[bool] = None) -> Optional[dict]:
    try:
        path = report_path(model_path, llamafile)
    except OSError:  # the model file is gone: no report of it
        return None
    return read_cached(path)


def save_report(model_path: str, report: dict) -> None:
    keep(report_path(model_path), report, indent=1)


def recommended_settings(model_path: str) -> Optional[Settings]:
    """The settings under which the doctor found this model's verify batches exact in this build,
    the fastest such; None when it has not run or found none."""
    report = load_report(model_path)
    exact = exact_setting(report["configs"]) if report else None
    return Settings(**exact["settings"]) if exact else None


# The doctor chooses backend sampling where it is this much faster on wall time: at the median
# of 2 rounds, one slow round once made two SmolLM2 settings read 17-22% faster on the backend.
BACKEND_MARGIN = 0.05


def backend_walls(measured: dict) -> tuple[float, float]:
    """(host, backend): wall ms per token of a doctor's backend-sampling measurement, its cases
    (no draft, drafting) summed: what its verdict weighs."""
    host, backend = (sum(case["ms_per_token"] for case in measured[name].values()) for name in ("host", "backend"))
    return host, backend


def recommended_backend_sampling(model_path: str, settings: Optional[Settings]) -> bool:
    """Whether the doctor found greedy rows faster sampled on the backend for this model and
    build, under `settings` (those the model loads with; None: llama_cpp's defaults)."""
    report = load_report(model_path)
    wanted = asdict(settings if settings is not None else Settings())
    config = next((c for c in report["configs"] if c["settings"] == wanted), None) if report else None
    return bool(config and config.get("backend_sampling", {}).get("pays"))


def measure_speeds(llm, prompt_tokens: int = 256, decodes: int = 32) -> tuple[float, float]:
    """Prompt processing and single-token decoding, tokens per second (medians of 3)."""
    prompt_tokens = min(prompt_tokens, context_limit(llm) - decodes - 1)
    tokens = np.random.default_rng(1).integers(100, llm.n_vocab(), prompt_tokens + decodes).tolist()
    prompt, decode = [], []
    for _ in range(3):
        llm.reset()
        start = time.perf_counter()
        llm.eval(tokens[:prompt_tokens])
        prompt.append(prompt_tokens / (time.perf_counter() - start))
        start = time.perf_counter()
        for token in tokens[prompt_tokens:]:
            llm.eval([token])
        decode.append(decodes / (time.perf_counter() - start))
    llm.reset()
    llm._requires_eval = True
    return float(np.median(prompt)), float(np.median(decode))


# -- the advice: a function of the measured figures alone


def exact_setting(configs: list[dict]) -> Optional[dict]:
    """The fastest measured setting (by ceiling) whose verify batches are invariant, or None."""
    invariant = [c for c in configs if c["invariant"]]
    return max(invariant, key=lambda c: c["ceiling"]) if invariant else None


def advise(report: dict, other_build: Optional[dict] = None) -> list[str]:
    """Plain words from a doctor report: what speculation can gain here, whether the output is
    exact and how to make it so, and which quantization verifies cheaper.

    `report`: {"llamafile": bool, "configs": [measure_settings() ...] (llama_cpp's defaults first),
    "quants"?: {name: ceiling}, "quant"?: this file's type}. `other_build`: the same model's report
    from the other build (with or without llamafile), when one was measured.
    """
    default = report["configs"][0]
    lines = []
    if default["ceiling"] < 1.05:
        lines.append(f"speculation cannot pay here: verifying n tokens costs about n single decodes "
                     f"(best {default['ceiling']:.2f}x)")
    else:
        lines.append(f"speculation pays here up to {default['ceiling']:.2f}x plain decoding (an always-right "
                     f"drafter verifying {default['best_n']} tokens a step); copy-heavy work gets a share of it")
    exact = exact_setting(report["configs"])
    if default["invariant"]:
        lines.append("output is exact with llama_cpp's default settings: greedy text is bit-identical to "
                     "plain decoding, and sampling keeps the model's distribution exactly")
    elif exact is not None:
        settings = Settings(**exact["settings"])
        lines.append(f"output is exact with {settings.label()}: {_price(default, exact)}; plookup.Llama "
                     f"applies these settings for this model once this report is cached")
    else:
        lines.append(f"output is not exact with this build ({default['summary']}): greedy text may differ "
                     f"from plain decoding where its two best tokens are near-tied")
        if report["llamafile"]:
            lines.append(_exact_build_line(other_build, default))
    if (backend := _backend_line(exact if exact is not None else default)) is not None:
        lines.append(backend)
    quants = report.get("quants") or {}
    if quants:
        best = max(quants, key=quants.get)
        if quants[best] > default["ceiling"] * 1.05:
            current = report.get("quant", "this file")
            lines.append(f"{best.upper()} verifies cheaper than {current} here: ceiling {quants[best]:.2f}x "
                         f"vs {default['ceiling']:.2f}x (requantized from this file: "
                         f"`-m MODEL:{best}`)")
    return lines


def _backend_line(config: dict) -> Optional[str]:
    """Where plookup.Llama samples greedy rows with the settings it loads (see
    :func:`recommended_backend_sampling`), and why; None where a report did not measure it."""
    measured = config.get("backend_sampling")
    if not measured:
        return None
    host, backend = backend_walls(measured)
    change = f"{host:.2f} -> {backend:.2f} ms per token, no draft and drafting together"
    if measured["pays"]:
        return f"greedy rows are sampled on the backend here ({change}); plookup.Llama does so for this model"
    return (f"greedy rows stay on the host: sampling them on the backend does not pay here ({change}, "
            f"at least {BACKEND_MARGIN:.0%} less needed)")


def _price(base: dict, other: dict) -> str:
    return (f"ceiling {base['ceiling']:.2f}x -> {other['ceiling']:.2f}x, prompt "
            f"{base['prompt_tps']:.0f} -> {other['prompt_tps']:.0f} tok/s, decode "
            f"{base['decode_tps']:.0f} -> {other['decode_tps']:.0f} tok/s")


def _exact_build_line(other_build: Optional[dict], default: dict) -> str:
    if other_build is None:
        return ("`make EXACT=1` builds llama.cpp without llamafile, whose batched kernels round "
                "differently; run `plookup doctor` in that build to see whether it makes this model exact")
    exact = exact_setting(other_build["configs"])
    if exact is None:
        return "`make EXACT=1` (without llamafile) does not make this model exact either (measured)"
    settings = Settings(**exact["settings"])
    return (f"`make EXACT=1` makes it exact for this model with {settings.label()}, at the price of "
            f"{_price(default, exact)} (measured)")
