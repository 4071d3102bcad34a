"""Per-generation speculative decoding counters, reported in completions' ``usage["speculative"]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class SpecStats:
    drafted: int = 0  # draft tokens sent to the model for verification
    accepted: int = 0  # of those, tokens the model agreed with
    # llama_decode calls that produced generated tokens: the prompt's last batch (the first token
    # is sampled from its last row, as in plain decoding), then one per verify step
    forward_passes: int = 0
    generated: int = 0  # tokens handed to the caller
    prefill_tokens: int = 0  # prompt tokens evaluated for this call (the rest was cached)
    shifted_tokens: int = 0  # of the cached ones, tokens of chunks moved into place (plookup.engine.reuse)
    exact: Optional[bool] = None  # verify batches bitwise equal to plain decoding here (plookup doctor)
    draft_seconds: float = 0.0  # time spent in the drafter
    sample_seconds: float = 0.0  # time sampling rows and applying the acceptance rule
    # how rows were sampled: "argmax" (greedy, read in place: plookup.verify.greedy), "chain" (llama.cpp's
    # sampler chain on the host), "plain" (llama_cpp's own loop, no speculation)
    sampler: Optional[str] = None
    accepted_from_memory: int = 0  # accepted tokens drafted from a cross-request memory
    accepted_from_corpus: int = 0  # accepted tokens drafted from a static corpus (plookup.index.corpus)
    # steps that verified two branches in one batch (drafted/accepted count the branch taken)
    branch_steps: int = 0
    alternative_taken: int = 0  # of those, steps where the target followed the second branch
    # [k] = steps whose draft had a token at position k / whose token at position k was accepted
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)

    def record_step(self, drafted: int, accepted: int) -> None:
        self.forward_passes += 1
        self.drafted += drafted
        self.accepted += accepted
        for counts in (self.drafted_per_position, self.accepted_per_position):
            counts.extend([0] * (drafted - len(counts)))
        for k in range(drafted):
            self.drafted_per_position[k] += 1
        for k in range(accepted):
            self.accepted_per_position[k] += 1

    def as_dict(self) -> dict:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "forward_passes": self.forward_passes,
            "generated": self.generated,
            "prefill_tokens": self.prefill_tokens,
            "shifted_tokens": self.shifted_tokens,
            "exact": self.exact,
            "accepted_per_position": list(self.accepted_per_position),
            "drafted_per_position": list(self.drafted_per_position),
            "draft_seconds": self.draft_seconds,
            "sample_seconds": self.sample_seconds,
            "sampler": self.sampler,
            "accepted_from_memory": self.accepted_from_memory,
            "accepted_from_corpus": self.accepted_from_corpus,
            "branch_steps": self.branch_steps,
            "alternative_taken": self.alternative_taken,
        }
