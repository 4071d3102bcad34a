"""Host time: what a decoder spends outside ``llama_decode`` while it generates.

Where a decode is fast (a GPU, Apple Silicon) the Python and C around it decide the speed, so the
bench reports it for every in-process system, llama_cpp's plain decoding included: the wall time
of the generation (after the prompt's prefill) minus the time inside ``llama_decode``, synchronized
so that a backend computing asynchronously is charged to the decode. Split into drafting, sampling
and acceptance (reading the rows), and the rest (bookkeeping: KV operations, ``input_ids``, stats,
stop checks).
"""

from __future__ import annotations

from ...measure.clock import DecodeClock

PARTS = ("draft", "sample", "other")


def host_record(seconds: float, clock: DecodeClock, stats) -> dict:
    """The host time of a generation that took `seconds` (prefill excluded), per part."""
    host = max(0.0, seconds - clock.decode_seconds)
    draft = stats.draft_seconds
    sample = stats.sample_seconds + clock.sample_seconds
    return dict(decode_s=clock.decode_seconds, decodes=clock.decodes, host_s=host,
                host_draft_s=draft, host_sample_s=sample, host_other_s=max(0.0, host - draft - sample))


def host_microseconds(records, per: str) -> dict:
    """Median over runs of host µs per generated token (`per` "token") or per decode ("decode"),
    in all and by part."""
    import statistics

    def each(record, key):
        n = len(record["tokens"]) if per == "token" else record["decodes"]
        return 1e6 * record[key] / max(1, n)

    out = {"host": statistics.median(each(r, "host_s") for r in records)}
    for part in PARTS:
        out[part] = statistics.median(each(r, f"host_{part}_s") for r in records)
    return out
