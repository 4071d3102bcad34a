"""The port (benchmarks/editors/llama_vim_session.py) against the real llama.vim: the requests the
plugin sent in a real Vim on a scripted scenario (tests/data/llama_vim/recording.json.gz, made by
tests/data/llama_vim/record.py against a fake server) are the port's on the same scenario with the
same answers, every field of every body, in the same order, each sent when Vim sent it (SLACK_MS). No Vim and no model are needed here. Controls: ports broken as a slip would break them
(the window a line short, a ring chunk dropped, the first request as slow as the speculative one,
no wait behind the request in flight, the job freed after the answer is handled) fail the same
comparison."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.editors import llama_vim_session as ts

DATA = Path(__file__).parent / "data" / "llama_vim"
# Vim sends later than the port by its own work before a request (sha256 over the context, curl's
# start: 30-70 ms here) and its timers' lag; never earlier
SLACK_MS = (-100, 10)


def recorder():
    spec = importlib.util.spec_from_file_location("llama_vim_record", DATA / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORD = recorder()
RECORDING = json.load(gzip.open(DATA / "recording.json.gz", "rt"))


def without_time(body: dict) -> dict:
    """A body less its chunks' `time` (Vim's reltime(), not the port's clock)."""
    return {**body, "input_extra": [{k: v for k, v in c.items() if k != "time"} for c in body["input_extra"]]}


def port_requests(vim_class=ts.Vim) -> list:
    """The port through the recorded scenario: [(ms sent, body)]."""
    truth = RECORD.truth_text()
    loop = ts.Loop()
    jobs = ts.FakeSlot(loop, lambda body: RECORD.answer(body, truth), RECORD.delay_ms)
    files = {RECORD.OTHER: (DATA / RECORD.OTHER_TEXT).read_text(), RECORD.EDITED: RECORD.edited_text()}
    vim = vim_class(loop, jobs, files, ts.vim_rand(RECORDING["rand_seed"]))
    ts.play(vim, RECORD.SCENARIO)
    loop.run_until(RECORD.SCENARIO[-1]["t"])
    return [(r.t_sent, r.body) for r in vim.sent]


def differences(port: list) -> list:
    """Where the port's requests part from the recording's: [str]."""
    recorded = RECORDING["requests"]
    found = []
    if len(port) != len(recorded):
        found.append(f"{len(port)} requests, not {len(recorded)}")
    for i, ((t, body), r) in enumerate(zip(port, recorded)):
        mine, theirs = without_time(body), without_time(r["body"])
        if mine != theirs:
            keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            found.append(f"request {i}: {', '.join(keys)} differ")
        elif not SLACK_MS[0] <= t - r["t_ms"] <= SLACK_MS[1]:
            found.append(f"request {i}: sent at {t:.0f} ms, llama.vim at {r['t_ms']} ms")
    return found


def test_the_recording_is_the_pinned_plugins_on_this_scenario():
    assert RECORDING["llama_vim_commit"] == RECORD.LLAMA_VIM_COMMIT == "a1c8e6e"
    assert [r["path"] for r in RECORDING["requests"]] == ["/infill"] * len(RECORDING["requests"])
    kinds = [("warm-up" if r["body"]["n_predict"] == 0 else r["body"]["t_max_predict_ms"]) for r in RECORDING["requests"]]
    # what the scenario exercises: warm-ups on the ring's timer (one in insert mode, after 3 s
    # still), first requests (250 ms) and speculative ones (1000 ms), a request per key in flight
    assert kinds.count("warm-up") == 6 and kinds.count(250) == 9 and kinds.count(1000) == 2
    assert len({len(r["body"]["input_extra"]) for r in RECORDING["requests"]}) == 5


def test_the_port_sends_what_llama_vim_sends_when_it_sends_it():
    assert differences(port_requests()) == []


def test_the_port_uses_llama_vims_rand():
    """Vim's rand() after test_srand_seed(7), as the real Vim printed it."""
    rand = ts.vim_rand(7)
    assert [rand(0, 0xFFFFFFFF) for _ in range(3)] == [1004282400, 2200021487, 1928073449]


class ShortWindow(ts.Vim):
    """A slip: the prefix a line short (n_prefix 255)."""

    def fim(self, *args, **kwargs):
        ts.N_PREFIX = 255
        try:
            super().fim(*args, **kwargs)
        finally:
            ts.N_PREFIX = 256


class DroppedChunk(ts.Vim):
    """A slip: the newest ring chunk left out of input_extra."""

    def send(self, request, done=None):
        request.body["input_extra"] = request.body["input_extra"][:-1] if len(request.body["input_extra"]) > 2 \
            else request.body["input_extra"]
        super().send(request, done)


class NoWait(ts.Vim):
    """A slip: a key's request sent at once, not behind the one in flight."""

    def fim(self, pos_x, pos_y, is_auto, prev, use_cache, origin=None):
        self.job_fim = None
        super().fim(pos_x, pos_y, is_auto, prev, use_cache, origin)


class LateExit(ts.Vim):
    """A slip: the FIM job freed after its answer is handled (the speculative request a retry later)."""

    def on_response(self, request, answer):
        for key in request.hashes:
            self.cache_insert(key, {"content": answer["content"]})
        if not self.hint_shown or not self.fim_data.get("can_accept"):
            self.try_hint(self.buffer.x, self.buffer.y, request)
        self.job_fim = None


def test_controls_broken_ports_fail():
    assert any("input_prefix" in d for d in differences(port_requests(ShortWindow)))
    assert any("input_extra" in d for d in differences(port_requests(DroppedChunk)))
    assert differences(port_requests(NoWait))
    assert any("sent at" in d for d in differences(port_requests(LateExit)))


def test_control_a_slower_first_request_fails(monkeypatch):
    monkeypatch.setattr(ts, "T_FIRST_PREDICT_MS", ts.T_MAX_PREDICT_MS)
    assert any("t_max_predict_ms" in d for d in differences(port_requests()))


@pytest.mark.parametrize("sampling", ts.SAMPLINGS)
def test_the_benchs_bodies_are_llama_vims_plus_its_fields(sampling):
    """The bench's bodies: llama.vim's, with the seed and the fields it reads; greedy also a temperature of 0."""
    ctx = {"prefix": "a\n", "middle": "b", "suffix": "\n", "indent": 0}
    plain = ts.fim_body(ctx, [], 250)
    body = ts.fim_body(ctx, [], 250, sampling, seed=5)
    assert body["seed"] == 5 and body["response_fields"][: len(plain["response_fields"])] == plain["response_fields"]
    extra = {k: v for k, v in body.items() if k not in plain or plain[k] != v}
    if sampling == "sampled":
        assert set(extra) == {"seed", "response_fields"} and "temperature" not in body
    else:
        assert set(extra) == {"seed", "response_fields", "samplers", "temperature"}
        assert body["samplers"][-1] == "temperature" and body["temperature"] == 0.0
