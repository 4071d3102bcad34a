"""Server counters in the Prometheus text format, named after vLLM's spec-decode metrics.

Counts accumulate over the server's life from each generation's :class:`plookup.SpecStats`;
``plookup_spec_decode_num_accepted_tokens_per_pos_total{position="k"}`` divided by
``plookup_spec_decode_num_drafted_tokens_per_pos_total{position="k"}`` is the acceptance rate of
the k-th draft token.
"""

from __future__ import annotations

from collections import Counter

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name -> help text for the counters without labels, in exposition order
TOTALS = {
    "generated_tokens": "Tokens generated for clients.",
    "forward_passes": "llama_decode calls that generated tokens (prefill excluded).",
    "spec_decode_num_drafts": "Verify steps that carried at least one draft token.",
    "spec_decode_num_draft_tokens": "Draft tokens sent to the model for verification.",
    "spec_decode_num_accepted_tokens": "Draft tokens the model agreed with.",
    "prediction_accepted_tokens": "Prediction tokens that appeared in the completion.",
    "prediction_rejected_tokens": "Prediction tokens that did not appear in the completion.",
}


class Metrics:
    """Counters of one server; not thread-safe, so update them from the event loop only."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()  # (path, HTTP status)
        self.totals: Counter[str] = Counter()
        self.drafted_per_position: Counter[int] = Counter()
        self.accepted_per_position: Counter[int] = Counter()

    def count_request(self, path: str, status: int) -> None:
        self.requests[path, status] += 1

    def record_generation(self, spec: dict) -> None:
        """Add one generation's ``usage["speculative"]`` (:meth:`SpecStats.as_dict`)."""
        self.totals["generated_tokens"] += spec["generated"]
        self.totals["forward_passes"] += spec["forward_passes"]
        self.totals["spec_decode_num_drafts"] += spec["drafted_per_position"][0] if spec["drafted_per_position"] else 0
        self.totals["spec_decode_num_draft_tokens"] += spec["drafted"]
        self.totals["spec_decode_num_accepted_tokens"] += spec["accepted"]
        self.drafted_per_position.update(dict(enumerate(spec["drafted_per_position"])))
        self.accepted_per_position.update(dict(enumerate(spec["accepted_per_position"])))

    def record_prediction(self, details: dict) -> None:
        self.totals["prediction_accepted_tokens"] += details["accepted_prediction_tokens"]
        self.totals["prediction_rejected_tokens"] += details["rejected_prediction_tokens"]

    def render(self) -> str:
        lines = _counter(
            "requests", "HTTP requests answered, by path and status.",
            [(f'path="{path}",status="{status}"', n) for (path, status), n in sorted(self.requests.items())],
        )  # fmt: skip
        for name, help_text in TOTALS.items():
            lines += _counter(name, help_text, [("", self.totals[name])])
        for name, help_text, counts in (
            ("spec_decode_num_drafted_tokens_per_pos", "Verify steps with a draft token at position k.",
             self.drafted_per_position),
            ("spec_decode_num_accepted_tokens_per_pos", "Verify steps whose draft token at position k was accepted.",
             self.accepted_per_position),
        ):  # fmt: skip
            lines += _counter(name, help_text, [(f'position="{k}"', n) for k, n in sorted(counts.items())])
        return "\n".join(lines) + "\n"


def _counter(name: str, help_text: str, samples: list[tuple[str, int]]) -> list[str]:
    full = f"plookup_{name}_total"
    lines = [f"# HELP {full} {help_text}", f"# TYPE {full} counter"]
    lines += [f"{full}{{{labels}}} {value}" if labels else f"{full} {value}" for labels, value in samples]
    return lines
