"""llama-server's sampler chain: the samplers a request lists, in its order, then a draw.

llama_cpp builds one fixed chain (penalties, top-k, typical, top-p, min-p, temperature, draw).
llama-server takes ``samplers``, an ordered list, and more samplers besides (DRY, XTC, top-n-sigma,
dynamic temperature, and ``infill``, which llama.vim and llama.vscode send for fill-in-the-middle).
:class:`Chain` is such a list with its settings; :meth:`Chain.build` makes the llama.cpp sampler
chain it describes, from llama.cpp's own samplers, for one generation: plookup verifies drafts
with whatever chain a generation samples with, so the order changes which tokens come out, never
whether drafting is exact.

As llama-server does: a logit bias comes first, a grammar next (it constrains whatever follows),
the listed samplers, then the draw with the call's seed; mirostat replaces the list by
temperature and mirostat. A temperature <= 0 leaves only the most likely token to draw: greedy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llama_cpp._internals as internals

# llama-server's sampler names, and the other spellings its `samplers` field takes
NAMES = {
    "penalties": "penalties", "dry": "dry", "top_n_sigma": "top_n_sigma", "top-n-sigma": "top_n_sigma",
    "top_k": "top_k", "top-k": "top_k", "typ_p": "typ_p", "typical_p": "typ_p", "typical": "typ_p",
    "typ-p": "typ_p", "typ": "typ_p", "top_p": "top_p", "top-p": "top_p", "nucleus": "top_p",
    "min_p": "min_p", "min-p": "min_p", "xtc": "xtc", "temperature": "temperature", "temp": "temperature",
    "infill": "infill",
}
DEFAULT_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")


def sampler_order(names) -> tuple[str, ...]:
    """The canonical names of a request's ``samplers`` (a ValueError names the unknown one)."""
    order = []
    for name in names:
        if not isinstance(name, str) or name not in NAMES:
            raise ValueError(f"unknown sampler {name!r}; known: {', '.join(sorted(set(NAMES.values())))}")
        order.append(NAMES[name])
    return tuple(order)


@dataclass(frozen=True)
class Chain:
    """A request's samplers, in order, with the settings llama_cpp's sampling arguments lack
    (those it has, top_k to temperature, come from :meth:`build`'s arguments)."""

    order: tuple[str, ...] = DEFAULT_ORDER
    logit_bias: dict[int, float] = field(default_factory=dict)
    penalty_last_n: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    min_keep: int = 0

    def build(self, llm, seed: int, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
              typical_p: float = 1.0, temp: float = 0.8, repeat_penalty: float = 1.0,
              frequency_penalty: float = 0.0, presence_penalty: float = 0.0, mirostat_mode: int = 0,
              mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, grammar=None, logits_processor=None,
              **_) -> internals.LlamaSampler:
        """The chain for one generation of `llm` (a llama_cpp.Llama), drawing with `seed`; the
        keyword arguments are llama_cpp's ``_init_sampler``'s."""
        if logits_processor is not None:  # a Python processor reads input_ids: llama_cpp's own chain only
            raise ValueError("a logits processor cannot run in a chain given by `samplers`")
        chain = internals.LlamaSampler()
        keep = max(1, self.min_keep)
        if self.logit_bias:
            chain.add_logit_bias(llm._n_vocab, self.logit_bias)
        if getattr(grammar, "patterns", None) is not None:  # lazy: binds once the text matches a pattern
            chain.add_grammar_lazy_patterns(llm._model, grammar, grammar.patterns, [])
        elif grammar is not None:
            chain.add_grammar(llm._model, grammar)
        if mirostat_mode in (1, 2):
            chain.add_temp(temp)
            if mirostat_mode == 1:
                chain.add_mirostat(llm._n_vocab, seed, mirostat_tau, mirostat_eta, 100)
            else:
                chain.add_mirostat_v2(seed, mirostat_tau, mirostat_eta)
            return chain
        for name in self.order:
            if name == "penalties":
                chain.add_penalties(llm._n_vocab, self.penalty_last_n, repeat_penalty, frequency_penalty,
                                    presence_penalty)
            elif name == "dry" and self.dry_multiplier != 0:
                last_n = self.dry_penalty_last_n if self.dry_penalty_last_n >= 0 else llm._n_ctx
                chain.add_dry(llm._model, self.dry_multiplier, self.dry_base, self.dry_allowed_length, last_n,
                              list(self.dry_sequence_breakers))
            elif name == "top_n_sigma" and self.top_n_sigma > 0:
                chain.add_top_n_sigma(self.top_n_sigma)
            elif name == "top_k":
                chain.add_top_k(top_k)
            elif name == "typ_p":
                chain.add_typical(typical_p, keep)
            elif name == "top_p":
                chain.add_top_p(top_p, keep)
            elif name == "min_p":
                chain.add_min_p(min_p, keep)
            elif name == "xtc" and self.xtc_probability > 0:
                chain.add_xtc(self.xtc_probability, self.xtc_threshold, keep, seed)
            elif name == "temperature":
                chain.add_temp_ext(temp, self.dynatemp_range, self.dynatemp_exponent)
            elif name == "infill":
                chain.add_infill(llm._model)
        chain.add_dist(seed)
        return chain

    def greedy(self, temp: float, mirostat_mode: int = 0) -> bool:
        """Whether the chain always draws the most likely token left (a temperature <= 0 in it)."""
        return mirostat_mode == 0 and temp <= 0 and "temperature" in self.order
