"""The `openai` client against `plookup serve`, with a Predicted Output.

    python examples/server_client.py [BASE_URL]

Without BASE_URL (e.g. http://127.0.0.1:8080/v1) it starts `plookup serve` on a free local port
with the bundled model, and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request

import openai

DOCUMENT = "The quick brown fox jumps over the lazy dog near the river bank."


@contextlib.contextmanager
def local_server():
    """Base URL of a `plookup serve` subprocess, answered once /v1/models is."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "plookup.app.cli", "serve", "--port", str(port)])
    try:
        url = f"http://127.0.0.1:{port}/v1"
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=5)
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit("plookup serve exited before answering")
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait()


def demo(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": f"Repeat this sentence exactly: {DOCUMENT}"}]
    reply = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=60,
        prediction={"type": "content", "content": DOCUMENT},
    )
    usage = reply.usage
    print(reply.choices[0].message.content)
    print(
        f"{usage.completion_tokens} tokens; prediction tokens accepted "
        f"{usage.completion_tokens_details.accepted_prediction_tokens}, rejected "
        f"{usage.completion_tokens_details.rejected_prediction_tokens}; "
        f"plookup: {usage.model_dump()['speculative']['forward_passes']} forward passes"
    )
    print("streamed:", end=" ", flush=True)
    for chunk in client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=60, stream=True):
        print(chunk.choices[0].delta.content or "", end="", flush=True)
    print()


def main() -> None:
    if len(sys.argv) > 1:
        demo(sys.argv[1])
    else:
        with local_server() as url:
            demo(url)


if __name__ == "__main__":
    main()
