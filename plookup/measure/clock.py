"""A clock for the host time of generation: seconds inside ``llama_decode`` (synchronized, so a
backend computing asynchronously is charged to the decode) and inside llama_cpp's ``sample``, for
`plookup bench` and `plookup doctor` to subtract from the wall time."""

from __future__ import annotations

import time

import llama_cpp


class DecodeClock:
    """Seconds inside the model's ``llama_decode`` and the number of calls, from :meth:`reset` on;
    and for a plain ``llama_cpp.Llama``, seconds inside its ``sample`` (plookup counts its own in
    ``SpecStats.sample_seconds``)."""

    def __init__(self, llm: llama_cpp.Llama):
        self.decode_seconds = self.sample_seconds = 0.0
        self.decodes = 0
        ctx = llm._ctx
        decode = ctx.decode

        def timed_decode(batch):
            start = time.perf_counter()
            try:
                return decode(batch)
            finally:
                llama_cpp.llama_synchronize(ctx.ctx)
                self.decode_seconds += time.perf_counter() - start
                self.decodes += 1

        ctx.decode = timed_decode
        sample = llm.sample

        def timed_sample(*args, **kwargs):
            start = time.perf_counter()
            try:
                return sample(*args, **kwargs)
            finally:
                self.sample_seconds += time.perf_counter() - start

        llm.sample = timed_sample

    def reset(self) -> None:
        self.decode_seconds = self.sample_seconds = 0.0
        self.decodes = 0
