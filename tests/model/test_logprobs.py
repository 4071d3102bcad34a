"""Logprobs while drafting (issue 26, item 3): plookup.Llama and `plookup serve` give llama_cpp's
own structures without logits_all, each emitted token's values read from the verify row that chose
it. Checked against plain llama_cpp decoding with ``logits_all=True`` on SmolLM2, with drafts
accepted and rejected (a prediction that is right, wrong, then right again): bit for bit where the
build is exact for the model (`make EXACT=1 test-exact`), elsewhere within the batch rounding; and a
control that reads each step's rows one off (a broken acceptance rule) lands far outside both.
"""

from __future__ import annotations

import dataclasses
import json

import llama_cpp
import numpy as np
import pytest
from fastapi.testclient import TestClient

import plookup
from plookup.app.serve.app import create_app
from plookup.draft.policy import CPU_COST_CURVE
from plookup.measure.settings import llamafile_in_build
from plookup.verify.accept import accept
from plookup.verify.logprobs import token_logprob

from conftest import LLAMA_KWARGS
from support.prompts import COUNT_PROMPT  # no near-tie in 20 tokens

EXACT_BUILD = not llamafile_in_build()
PARTLY_RIGHT = " 13, 14, 15, 99, 98, 16, 17, 18"  # right, wrong, right again: drafts accepted and rejected
REQUEST = dict(max_tokens=20, temperature=0.0, repeat_penalty=1.0)  # (the server's default penalty is 1.1)
TOP = 3
# |Δlogprob| against plain decoding where the build is not exact: a logprob is a logit less the
# row's log-sum-exp, so it moves by at most twice the largest logit difference that batch rounding
# makes (plookup doctor, SmolLM2 Q4_1, default build: 0.62).
BOUND = 1.3
# A row one off gives other tokens' values: measured > 5 here; anything above the bound fails.
OFF_BY_ONE = 3 * BOUND


@pytest.fixture(scope="module")
def smol(model_path):
    """A SmolLM2 of this module's own, its drafting policy fresh: the session's `smol` has learned
    from whichever tests ran before on its worker, and drafted PARTLY_RIGHT in pieces that were all
    accepted, leaving no rejected draft to check (two xdist workers)."""
    return plookup.Llama(model_path["smollm2"], cost_curve=CPU_COST_CURVE, **LLAMA_KWARGS)


@pytest.fixture(scope="module")
def reference(model_path):
    """Plain llama_cpp decoding with logits_all, the only way llama_cpp gives logprobs."""
    return llama_cpp.Llama(model_path["smollm2"], logits_all=True, **LLAMA_KWARGS)


def test_a_rows_top_tokens_in_llama_cpps_order():
    """The value is llama_cpp's logits_to_logprobs; the alternatives are its sorted(zip(values,
    ids), reverse=True)[:n], ties at the cut included (largest id first among equal values)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)
    logits[[3, 500, 999]] = logits.max() + 1  # a three-way tie at the top ...
    logits[[10, 20, 30, 40]] = np.sort(logits)[-8]  # ... and a four-way one across the cut
    values = llama_cpp.Llama.logits_to_logprobs(logits)
    llama_cpps = sorted(zip(values.tolist(), range(len(values))), reverse=True)
    for n in (0, 1, 3, 6, 8, 1000, 2000):
        got = token_logprob(logits, 7, n)
        assert got.logprob == values[7]
        assert got.top == tuple((i, v) for v, i in llama_cpps[:n])


def off_by_one(draft, sample, stop=None, branch=None):
    """The acceptance rule with a bug in the rows it reports: each token after a step's first
    reads the row before its own."""
    verdict = accept(draft, sample, stop, branch)
    return dataclasses.replace(verdict, rows=tuple(max(row - 1, 0) for row in verdict.rows))


def listing(result) -> dict:
    """The completion's logprobs; a stream's chunks joined."""
    if isinstance(result, dict):
        return result["choices"][0]["logprobs"]
    joined = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    for chunk in result:
        for key, values in (chunk["choices"][0]["logprobs"] or {}).items():
            joined[key] += values
    return joined


def difference(got: dict, plain: dict) -> float:
    """The largest |Δlogprob| of the tokens and of the alternatives both list, after checking
    that the structures list the same tokens at the same offsets."""
    assert set(got) == set(plain) and got["tokens"] == plain["tokens"] and got["text_offset"] == plain["text_offset"]
    deltas = [abs(a - b) for a, b in zip(got["token_logprobs"], plain["token_logprobs"], strict=True)]
    for mine, theirs in zip(got["top_logprobs"], plain["top_logprobs"], strict=True):
        deltas += [abs(mine[token] - theirs[token]) for token in mine.keys() & theirs.keys()]
    return max(deltas)


def assert_plains(got: dict, plain: dict) -> None:
    if EXACT_BUILD:
        assert got == plain
    else:
        assert difference(got, plain) <= BOUND


@pytest.mark.exact_build
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completion_logprobs_are_plain_decodings_rows(reference, smol, monkeypatch, stream):
    plain = reference.create_completion(COUNT_PROMPT, logprobs=TOP, stream=stream, **REQUEST)
    if stream:
        plain = list(plain)

    def ask():
        result = smol.create_completion(COUNT_PROMPT, logprobs=TOP, stream=stream, prediction=PARTLY_RIGHT, **REQUEST)
        return (list(result), result.stats) if stream else (result, smol.last_stats)

    got, stats = ask()
    assert stats.accepted > 0 and stats.drafted > stats.accepted  # drafts accepted and rejected
    assert stats.sampler == "argmax"
    if stream:  # llama_cpp streams a token a chunk with its logprobs; so does plookup on ASCII text
        shape = [(c["choices"][0]["text"], c["choices"][0]["logprobs"] and c["choices"][0]["logprobs"]["tokens"]) for c in got]
        assert shape == [(c["choices"][0]["text"], c["choices"][0]["logprobs"] and c["choices"][0]["logprobs"]["tokens"]) for c in plain]
    assert_plains(listing(got), listing(plain))
    print(f"max |Δlogprob| vs plain: {difference(listing(got), listing(plain)):.3g}")

    monkeypatch.setattr(smol._engine.verdicts, "accept", off_by_one)
    wrong, stats = ask()
    assert stats.accepted > 0
    assert difference(listing(wrong), listing(plain)) > OFF_BY_ONE


@pytest.mark.exact_build
def test_chat_logprobs_are_llama_cpps_conversion_of_them(reference, smol):
    messages = [{"role": "user", "content": "Count from 1 to 30, separated by commas."}]
    kwargs = dict(REQUEST, logprobs=True, top_logprobs=2)
    plain = reference.create_chat_completion(messages, **kwargs)["choices"][0]
    text = plain["message"]["content"]
    plain = plain["logprobs"]
    # A prediction of plain's answer with a wrong word inside: drafts accepted and rejected.
    got = smol.create_chat_completion(messages, prediction=text[:12] + " zebra" + text[12:], **kwargs)
    assert 0 < got["usage"]["speculative"]["accepted"] < got["usage"]["speculative"]["drafted"]
    assert_chats(got["choices"][0]["logprobs"]["content"], plain["content"])
    assert plain["content"][0]["top_logprobs"][0].keys() == {"token", "logprob", "bytes"}
    streamed = [c["choices"][0]["logprobs"] for c in smol.create_chat_completion(messages, stream=True, **kwargs)]
    assert_chats([t for part in streamed if part for t in part["content"]], plain["content"])


def assert_chats(got: list[dict], plain: list[dict]) -> None:
    """Chat logprobs (OpenAI's content list): the same tokens, and plain's values (see assert_plains);
    each entry's ``bytes`` the token's UTF-8 bytes as a list, as OpenAI and llama-server give them,
    where llama_cpp's conversion leaves None."""
    assert [t["token"] for t in got] == [t["token"] for t in plain]
    if EXACT_BUILD:
        assert got == [with_bytes(t) for t in plain]
    else:
        assert max(abs(a["logprob"] - b["logprob"]) for a, b in zip(got, plain)) <= BOUND


@pytest.mark.exact_build
def test_logprobs_read_on_the_host_and_on_the_plain_path(reference, smol, monkeypatch):
    """A logprobs request samples its rows on the host, where backend sampling would hand back
    token ids only; a Python logits processor's plain loop reads its rows too."""
    plain = listing(reference.create_completion(COUNT_PROMPT, logprobs=TOP, **REQUEST))
    monkeypatch.setattr(smol, "backend_sampling", True)
    smol.create_completion(COUNT_PROMPT, **REQUEST)
    assert smol.last_stats.sampler == "backend"  # the control: without logprobs the backend samples
    assert_plains(listing(smol.create_completion(COUNT_PROMPT, logprobs=TOP, prediction=PARTLY_RIGHT, **REQUEST)), plain)
    assert smol.last_stats.sampler == "argmax" and smol.last_stats.accepted > 0
    keep = llama_cpp.LogitsProcessorList([lambda ids, scores: scores])
    with pytest.warns(UserWarning, match="decoding without speculation"):
        got = smol.create_completion(COUNT_PROMPT, logprobs=TOP, logits_processor=keep, **REQUEST)
    assert smol.last_stats.sampler == "plain"
    assert_plains(listing(got), plain)


def test_what_is_not_given_is_a_value_error(smol):
    with pytest.raises(ValueError, match="echo=True"):
        smol.create_completion(COUNT_PROMPT, max_tokens=4, logprobs=2, echo=True)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="logprobs must be an integer"):
            smol.create_completion(COUNT_PROMPT, max_tokens=4, logprobs=bad)
    assert smol.create_completion(COUNT_PROMPT, max_tokens=4, echo=True)["choices"][0]["text"].startswith(COUNT_PROMPT)


def events(response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


@pytest.mark.exact_build
def test_server_logprobs_on_both_routes_streamed_and_not(reference, smol):
    plain = listing(reference.create_completion(COUNT_PROMPT, logprobs=TOP, **REQUEST))
    body = dict(prompt=COUNT_PROMPT, logprobs=TOP, prediction={"type": "content", "content": PARTLY_RIGHT}, **REQUEST)
    with TestClient(create_app(smol, "smol")) as client:
        whole = client.post("/v1/completions", json=body).json()
        assert whole["usage"]["speculative"]["accepted"] > 0
        assert_plains(listing(whole), plain)
        assert_plains(listing(events(client.post("/v1/completions", json=dict(body, stream=True)))), plain)
        refused = client.post("/v1/completions", json=dict(body, echo=True))
        assert refused.status_code == 400 and "echo=True" in refused.json()["error"]["message"]
        messages = [{"role": "user", "content": "Count from 1 to 30, separated by commas."}]
        chat = dict(REQUEST, messages=messages, max_tokens=8)
        plain = reference.create_chat_completion(**chat, logprobs=True, top_logprobs=2)["choices"][0]["logprobs"]["content"]
        for asked in (dict(logprobs=True, top_logprobs=2), dict(logprobs=True)):  # OpenAI's: no top_logprobs
            content = client.post("/v1/chat/completions", json=dict(chat, **asked)).json()["choices"][0]["logprobs"]["content"]
            top = asked.get("top_logprobs", 0)  # the token itself among them (llama_cpp's way)
            assert all(len(t["top_logprobs"]) in (top, top + 1) for t in content)
            assert_chats([dict(t, top_logprobs=None) for t in content], [dict(t, top_logprobs=None) for t in plain])
            chunks = events(client.post("/v1/chat/completions", json=dict(chat, stream=True, **asked)))
            streamed = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["content"]]
            assert [t["token"] for t in streamed] == [t["token"] for t in content]
        assert client.post("/v1/chat/completions", json=chat).json()["choices"][0]["logprobs"] is None


def with_bytes(entry: dict) -> dict:
    """A chat logprobs entry (and its alternatives) with ``bytes`` filled in where it is None."""
    def filled(one: dict) -> dict:
        return dict(one, bytes=list(one["token"].encode("utf-8")) if one.get("bytes") is None else one["bytes"])

    out = filled(entry)
    if entry.get("top_logprobs") is not None:
        out["top_logprobs"] = [filled(one) for one in entry["top_logprobs"]]
    return out
