"""Server soak: 1,000 mixed requests from concurrent clients on loopback, some abandoned mid-stream.

Every request is answered or was cancelled by its own client, none gets a 5xx, the server's memory
stays bounded, and each greedy answer equals the one the same request got when sent alone. The
prompts' greedy outputs have no near-tie within the tokens asked for, so equality is exact.
"""

from __future__ import annotations

import itertools
import random
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil

from conftest import serving

MODEL = "soak"
N_REQUESTS = 1000
N_CLIENTS = 4
RSS_GROWTH_BOUND_MIB = 150  # indexes, metrics and Python garbage: no per-request leak can fit

ABC = "a b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e f g h i j k l m n o p q r s t u v w x y z\na b c d e"
COUNT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
PREDICTION = {"type": "content", "content": " f g h i j k l m n o p q r s t u v w x y z"}


def request_kinds():
    """(name, call) for every mix of endpoint, stream, prediction and length."""
    kinds = []
    for prompt, endpoint, stream, predicted, max_tokens in itertools.product(
        (ABC, COUNT), ("completion", "chat"), (False, True), (False, True), (4, 24)
    ):
        if endpoint == "chat" and prompt == COUNT:
            continue  # chat answers to it are long-winded and tie early
        spec = (prompt, endpoint, stream, predicted, max_tokens)
        kinds.append(((prompt[:5], *spec[1:]), spec))
    return kinds


def send(client: openai.OpenAI, spec, cancel: bool = False) -> str | None:
    prompt, endpoint, stream, predicted, max_tokens = spec
    extra = {"extra_body": {"prediction": PREDICTION}} if predicted else {}
    common = dict(model=MODEL, temperature=0.0, max_tokens=max_tokens, stream=stream, **extra)
    if endpoint == "completion":
        response = client.completions.create(prompt=prompt, **common)
        pieces = (lambda r: r.choices[0].text)
    else:
        response = client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **common)
        pieces = (lambda r: r.choices[0].delta.content or "") if stream else (lambda r: r.choices[0].message.content)
    if not stream:
        return pieces(response)
    text = []
    for chunk in response:
        text.append(pieces(chunk) if chunk.choices else "")
        if cancel and len(text) >= 2:
            response.close()  # the client walks away mid-stream
            return None
    return "".join(text)


def test_thousand_mixed_requests():
    with serving(MODEL) as (url, process):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        kinds = request_kinds()
        alone = {name: send(client, spec) for name, spec in kinds}  # the serial reference
        rss_before = psutil.Process(process.pid).memory_info().rss

        rng = random.Random(0)
        plan = [(rng.choice(kinds), rng.random() < 0.1) for _ in range(N_REQUESTS)]

        def run(item):
            (name, spec), cancel = item
            try:
                return name, cancel and spec[2], send(client, spec, cancel=cancel and spec[2]), None
            except openai.APIStatusError as e:
                return name, False, None, e.status_code

        with ThreadPoolExecutor(N_CLIENTS) as pool:
            results = list(pool.map(run, plan))
        rss_after = psutil.Process(process.pid).memory_info().rss

    errors = [status for _, _, _, status in results if status is not None]
    assert errors == [], f"{len(errors)} requests failed: {sorted(set(errors))}"
    cancelled = sum(1 for _, was_cancelled, _, _ in results if was_cancelled)
    answered = [(name, text) for name, was_cancelled, text, _ in results if not was_cancelled]
    assert cancelled > 0 and len(answered) + cancelled == N_REQUESTS
    mismatches = [name for name, text in answered if text != alone[name]]
    assert mismatches == [], f"{len(mismatches)} answers differ from the serial run, e.g. {mismatches[:3]}"
    assert (rss_after - rss_before) / 2**20 < RSS_GROWTH_BOUND_MIB
