"""Server metrics through ``prometheus_client``, named after vLLM's spec-decode metrics.

Each request is counted once, by route and HTTP status; routes outside the app's own count under
"other", so no client can grow the label set. Generation counters add each request's own
``usage["speculative"]`` (a failed request adds nothing there).
``plookup_spec_decode_num_accepted_tokens_per_pos_total{position="k"}`` divided by
``plookup_spec_decode_num_drafted_tokens_per_pos_total{position="k"}`` is the acceptance rate of
the k-th draft token.

llama-server's own names are there too (``llamacpp:prompt_tokens_total``,
``llamacpp:tokens_predicted_total``, ``llamacpp:n_decode_total``, its ``spec_decode`` counters,
throughput and load gauges), from the same requests, so that dashboards built for llama-server work.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = CONTENT_TYPE_LATEST
OTHER_ROUTE = "other"

# name (without plookup_ and _total) -> help text, for the counters without labels
TOTALS = {
    "generated_tokens": "Tokens generated for clients.",
    "forward_passes": "llama_decode calls that generated tokens (the prompt's last batch, then verify steps).",
    "spec_decode_num_drafts": "Verify steps that carried at least one draft token.",
    "spec_decode_num_draft_tokens": "Draft tokens sent to the model for verification.",
    "spec_decode_num_accepted_tokens": "Draft tokens the model agreed with.",
    "spec_decode_num_accepted_tokens_from_memory": "Accepted draft tokens drafted from the cross-request memory.",
    "spec_decode_num_accepted_tokens_from_corpus": "Accepted draft tokens drafted from the corpus (--corpus).",
    "prediction_accepted_tokens": "Prediction tokens that appeared in the completion.",
    "prediction_rejected_tokens": "Prediction tokens that did not appear in the completion.",
}


# llama-server's counters (without _total) -> help text: its README's "/metrics" table
LLAMACPP_TOTALS = {
    "prompt_tokens": "Number of prompt tokens processed.",
    "prompt_seconds": "Prompt process time in seconds.",
    "tokens_predicted": "Number of generation tokens processed.",
    "tokens_predicted_seconds": "Predict process time in seconds.",
    "spec_decode_num_draft_tokens": "Total draft tokens generated (0 when spec-decode is off).",
    "spec_decode_num_accepted_tokens": "Total draft tokens accepted by the target model (0 when spec-decode is off).",
    "spec_decode_num_drafts": "Total speculative decoding verification steps (0 when spec-decode is off).",
}


class Metrics:
    """One server's metrics, in a registry of its own."""

    def __init__(self, routes: frozenset[str]):
        self.routes = routes
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("plookup_requests", "HTTP requests answered, by route and status.",
                                ["path", "status"], registry=registry)
        self.totals = {name: Counter(f"plookup_{name}", text, registry=registry) for name, text in TOTALS.items()}
        self.drafted_per_position = Counter(
            "plookup_spec_decode_num_drafted_tokens_per_pos", "Verify steps with a draft token at position k.",
            ["position"], registry=registry,
        )
        self.accepted_per_position = Counter(
            "plookup_spec_decode_num_accepted_tokens_per_pos",
            "Verify steps whose draft token at position k was accepted.", ["position"], registry=registry,
        )
        self.llamacpp = {name: Counter(f"llamacpp:{name}", text, registry=registry)
                         for name, text in LLAMACPP_TOTALS.items()}
        self.llamacpp_accepted_per_position = Counter(
            "llamacpp:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", ["position"],
            registry=registry,
        )
        self.queue_depth = Gauge("plookup_queue_depth", "Requests waiting for the model.", registry=registry)
        self.queue_wait = Histogram("plookup_queue_wait_seconds", "Time requests waited for the model.",
                                    buckets=(0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=registry)

    def count_request(self, path: str, status: int) -> None:
        self.requests.labels(path if path in self.routes else OTHER_ROUTE, str(status)).inc()

    def record_generation(self, spec: dict) -> None:
        """Add one generation's ``usage["speculative"]`` (:meth:`plookup.SpecStats.as_dict`)."""
        totals = self.totals
        totals["generated_tokens"].inc(spec["generated"])
        totals["forward_passes"].inc(spec["forward_passes"])
        totals["spec_decode_num_drafts"].inc(spec["drafted_per_position"][0] if spec["drafted_per_position"] else 0)
        totals["spec_decode_num_draft_tokens"].inc(spec["drafted"])
        totals["spec_decode_num_accepted_tokens"].inc(spec["accepted"])
        totals["spec_decode_num_accepted_tokens_from_memory"].inc(spec["accepted_from_memory"])
        totals["spec_decode_num_accepted_tokens_from_corpus"].inc(spec["accepted_from_corpus"])
        for counter, counts in ((self.drafted_per_position, spec["drafted_per_position"]),
                                (self.accepted_per_position, spec["accepted_per_position"]),
                                (self.llamacpp_accepted_per_position, spec["accepted_per_position"])):
            for position, n in enumerate(counts):
                counter.labels(str(position)).inc(n)
        llamacpp = self.llamacpp
        llamacpp["prompt_tokens"].inc(spec["prefill_tokens"])
        llamacpp["tokens_predicted"].inc(spec["generated"])
        llamacpp["spec_decode_num_draft_tokens"].inc(spec["drafted"])
        llamacpp["spec_decode_num_accepted_tokens"].inc(spec["accepted"])
        llamacpp["spec_decode_num_drafts"].inc(spec["drafted_per_position"][0] if spec["drafted_per_position"] else 0)

    def record_timings(self, timings: dict) -> None:
        """Add one generation's llama-server ``timings`` (its prompt and predict times)."""
        self.llamacpp["prompt_seconds"].inc(timings["prompt_ms"] / 1000)
        self.llamacpp["tokens_predicted_seconds"].inc(timings["predicted_ms"] / 1000)

    def watch_model(self, llm) -> None:
        """Expose the model's engine, read at each scrape: its running generations, and the
        steps it has decoded and their rows (the engine counts them; nothing is copied here)."""
        self.registry.register(EngineCollector(llm))
        self.registry.register(LlamaCppCollector(self, llm))

    def record_prediction(self, details: dict) -> None:
        self.totals["prediction_accepted_tokens"].inc(details["accepted_prediction_tokens"])
        self.totals["prediction_rejected_tokens"].inc(details["rejected_prediction_tokens"])

    def render(self) -> bytes:
        return generate_latest(self.registry)


class EngineCollector:
    """``plookup_active_slots``, ``plookup_steps_total`` and ``plookup_step_rows_total`` (rows per
    step = their ratio) from a :class:`plookup.Llama`'s engine."""

    def __init__(self, llm):
        self.llm = llm

    def collect(self):
        steps, rows = self.llm.decode_counts()
        yield GaugeMetricFamily("plookup_active_slots", "Generations running on the model's slots.",
                                value=self.llm.busy_slots())
        yield CounterMetricFamily("plookup_steps", "llama_decode calls of the engine (every slot's rows in one).",
                                  value=steps)
        yield CounterMetricFamily("plookup_step_rows", "Rows (tokens) those calls decoded: / steps = tokens per step.",
                                  value=rows)


class LlamaCppCollector:
    """llama-server's gauges and its llama_decode count, read at each scrape: throughput (its
    counters' ratios), requests generating and waiting, and the engine's decode steps."""

    def __init__(self, metrics: Metrics, llm):
        self.metrics, self.llm = metrics, llm

    def collect(self):
        total = {name: counter.collect()[0].samples[0].value for name, counter in self.metrics.llamacpp.items()}
        waiting = self.metrics.queue_depth.collect()[0].samples[0].value

        def rate(tokens: str, seconds: str) -> float:
            return total[tokens] / total[seconds] if total[seconds] else 0.0

        yield GaugeMetricFamily("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
                                value=rate("prompt_tokens", "prompt_seconds"))
        yield GaugeMetricFamily("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.",
                                value=rate("tokens_predicted", "tokens_predicted_seconds"))
        yield GaugeMetricFamily("llamacpp:requests_processing", "Number of requests processing.",
                                value=self.llm.busy_slots())
        yield GaugeMetricFamily("llamacpp:requests_deferred", "Number of requests deferred.", value=waiting)
        yield CounterMetricFamily("llamacpp:n_decode", "Total Number of llama_decode() calls.", value=self.llm.decode_counts()[0])
