"""A model over llama.cpp's RPC backend: `plookup rpc-server` on 127.0.0.1 in a process of its own
(started and stopped here), SmolLM2 loaded over it with ``plookup.Llama(rpc_servers=...)``.

Greedy output with drafting equals plain decoding of the model loaded locally, up to the first
near-tie (the server's CPU backend holds the weights unrepacked and runs other threads, so rows
may round differently); a server that cannot be used is an RpcError naming it within seconds; a
server killed mid-generation ends the client process with a message naming it and status
EXIT_RPC_LOST (ggml's RPC client aborts on a lost connection; see plookup.api.rpc).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import LLAMA_KWARGS, pair
from support.plain import NEAR_TIE, WORKLOADS, chat_prompt_tokens, first_divergence, first_near_tie, greedy_with_gaps

import plookup
from plookup.api import rpc, rpc_check
from plookup.api.measured import NOTHING_MEASURED
from plookup.app.bench.local_server import free_port

pytestmark = pytest.mark.skipif(
    not rpc.available(),
    reason="the installed llama_cpp has no RPC backend (llama-cpp-python built without -DGGML_RPC=ON; "
           "`make install` builds it with)",
)

STARTUP_S = 60
MAX_TOKENS = 64
# Over RPC every load sends the weights to the server; the curve and the probe would decode over it
# too: the built-in curve keeps the test short (drafting is what it checks, not its sizing).
RPC_KWARGS = dict(LLAMA_KWARGS, **NOTHING_MEASURED)
# `plookup serve` for the tests of a lost server, which need no drafts: without them it measures
# nothing over the server before it answers (30-70 s a start, each on a new port).
UNDRAFTED = ("--no-memory", "--draft-max", "0")


@contextlib.contextmanager
def rpc_server(threads: int = 1):
    """`plookup rpc-server` on 127.0.0.1 in a subprocess: yields (endpoint, process)."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    log = tempfile.TemporaryFile("w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "plookup.app.cli", "rpc-server", "--port", str(port), "--threads", str(threads)],
        stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        try:
            rpc_check.wait_for_server(endpoint, STARTUP_S, alive=lambda: server.poll() is None)
        except rpc_check.RpcError:
            log.seek(0)
            pytest.fail(f"plookup rpc-server did not start:\n{log.read()[-3000:]}")
        yield endpoint, server
    finally:
        server.kill()
        server.wait(timeout=30)
        log.close()


@pytest.mark.budget(45)  # 35 s here with the local pair's first load; sends the weights to the server
def test_greedy_over_rpc_equals_local_decoding(model_path, capsys):
    _, plain, _ = pair("smollm2", model_path)
    prompt = chat_prompt_tokens(plain, WORKLOADS[0].messages)  # a code edit: copies, so drafts
    reference, gaps = greedy_with_gaps(plain, prompt, MAX_TOKENS)
    with rpc_server() as (endpoint, _):
        llm = plookup.Llama(model_path["smollm2"], rpc_servers=[endpoint], **RPC_KWARGS)
        try:
            assert llm.rpc_devices.endpoints == [endpoint] and len(llm.rpc_devices.devices) == 1
            assert rpc.live_servers() == [endpoint]
            tokens = list(itertools.islice(llm.generate(prompt, temp=0.0), len(reference)))
            stats = llm.last_stats
        finally:
            llm.close()
        assert rpc.live_servers() == []
        # The model is gone, and with it ggml's connection: the server takes a client again.
        assert rpc_check.check_server(endpoint) == rpc_check.RPC_PROTO
    tie = first_near_tie(gaps, NEAR_TIE["smollm2"])
    diverged = first_divergence(reference, tokens)
    assert tokens[:tie] == reference[:tie], f"differs at {diverged}, first near-tie {tie}"
    assert tie >= 16, f"only {tie} tokens before the first near-tie: pick another prompt"
    assert stats.accepted > 0 and stats.forward_passes < len(tokens)
    with capsys.disabled():
        print(f"\nover RPC: {len(tokens)} tokens in {stats.forward_passes} passes, {stats.accepted} accepted; "
              f"first near-tie {tie}, first difference {diverged}")


def test_a_closed_port_is_an_error_naming_the_server_within_seconds(model_path):
    endpoint = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(plookup.RpcError, match=f"RPC server {endpoint}: cannot connect"):
        plookup.Llama(model_path["smollm2"], rpc_servers=endpoint, **RPC_KWARGS)
    assert time.monotonic() - start < 5
    assert rpc.live_servers() == []


def test_the_command_line_names_the_server_it_cannot_reach(model_path):
    endpoint = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "plookup.app.cli", "generate", "-m", model_path["smollm2"], "--rpc", endpoint,
         "-p", "x", "--no-spec"], capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1 and f"RPC server {endpoint}: cannot connect" in done.stderr, done.stderr


def test_the_doctor_measures_the_cost_curve_over_the_servers(model_path, tmp_path):
    """`plookup doctor --rpc`: the curve measured through the server, cached under a key naming
    it (where a load over it finds it); no report of the file written (its exactness is local)."""
    env = dict(os.environ, PLOOKUP_CACHE_DIR=str(tmp_path))
    with rpc_server() as (endpoint, _):
        done = subprocess.run(
            [sys.executable, "-m", "plookup.app.cli", "doctor", "-m", model_path["smollm2"], "--rpc", endpoint,
             "--max-draft", "8", "--threads", "1", "--json", str(tmp_path / "r.json")],
            capture_output=True, text=True, timeout=300, env=env,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rpc"] == [endpoint] and len(report["cost"]) == 9 and report["cost"][0] == 1.0
    assert f"over RPC: {endpoint}" in done.stdout and "always-right ceiling" in done.stdout
    curves = list((tmp_path / "cost-curves").glob("*.json"))
    assert len(curves) == 1 and json.loads(curves[0].read_text())["cost"] == report["cost"]
    # no doctor report (locks/: the measurement's lock, measure.cache)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cost-curves", "locks", "r.json"]


@pytest.mark.budget(120)
def test_the_bench_runs_its_systems_over_the_server_one_after_another(model_path, tmp_path):
    """`plookup bench --rpc`: an RPC server serves one client at a time, so the reference and each
    system load over it in turn (all at once, the second client would wait unanswered and fail).
    Plain decoding and plookup over the server reproduce the reference decoded over it up to the
    first near-tie (seen on a question: a top-2 logit gap of 0.07 parted both, where the worker's
    rows round otherwise than the reference's); plookup drafts a copy workload and keeps some of it
    (fewer passes than tokens)."""
    env = dict(os.environ, PLOOKUP_CACHE_DIR=str(tmp_path))
    # One copy-heavy workload of --quick's three (the others, a proofread and a question, were a
    # third of the test's 50 s and check nothing the copy does not)
    copy = next(w for w in WORKLOADS if w.name == "code-docstring:textwrap.indent")
    workload_file = tmp_path / "w.jsonl"
    workload_file.write_text(json.dumps({"name": copy.name, "kind": copy.kind, "messages": copy.messages}) + "\n")
    with rpc_server() as (endpoint, _):
        done = subprocess.run(
            [sys.executable, "-m", "plookup.app.cli", "bench", "-m", model_path["smollm2"], "--rpc", endpoint,
             "--workload", str(workload_file), "--repeats", "1", "--systems", "plain,plookup-suffix", "--max-tokens", "24",
             "--max-draft", "8", "--threads", "1", "--json", str(tmp_path / "b.json")],
            capture_output=True, text=True, timeout=600, env=env,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    standard = json.loads((tmp_path / "b.json").read_text())["phases"]["standard"]
    assert standard["systems"] == ["plain", "plookup-suffix"]
    assert set(standard["summary"]) == {"plain", "plookup-suffix"}
    for system in ("plain", "plookup-suffix"):
        workloads = standard["summary"][system]
        assert len(workloads) == 1 and all(w["generated"] == 24 for w in workloads.values())
        assert all(w["identical"] or w["divergence"]["gap"] < NEAR_TIE["smollm2"] for w in workloads.values()), workloads
    # How far it drafts follows the curve measured over the server, which moves from machine to
    # machine (one run here: 2 rows cost 2.47 single decodes, and 24 tokens took 16 passes; the
    # CI machine's took under 12): that it drafts, and keeps what it drafts, does not.
    copy = standard["summary"]["plookup-suffix"]["code-docstring:textwrap.indent"]
    assert copy["accepted"] > 0 and copy["passes_per_token"] < 1, copy


def test_a_server_busy_with_another_client_is_an_error_within_the_timeout():
    with rpc_server() as (endpoint, _):
        host, _, port = endpoint.rpartition(":")
        with socket.create_connection((host, int(port))):  # holds the server: one client at a time
            start = time.monotonic()
            with pytest.raises(rpc_check.RpcError, match=f"RPC server {endpoint}: no answer within 1 s"):
                rpc_check.check_server(endpoint, timeout=1)
            assert time.monotonic() - start < 3


CLIENT = """
import sys
import plookup
from plookup.draft.policy import CPU_COST_CURVE

llm = plookup.Llama(sys.argv[1], rpc_servers=sys.argv[2], n_ctx=512, n_threads=1, n_threads_batch=1,
                    verbose=False, cost_curve=CPU_COST_CURVE, exactness=None)
while True:
    for i, chunk in enumerate(llm.create_completion("1, 2, 3, 4, 5,", max_tokens=400, temperature=0, stream=True)):
        if i == 0:
            print("started", flush=True)
"""


@pytest.mark.budget(60)
def test_a_server_killed_mid_generation_ends_the_client_with_a_message_naming_it(model_path):
    with rpc_server() as (endpoint, server):
        client = subprocess.Popen([sys.executable, "-c", CLIENT, model_path["smollm2"], endpoint],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([client.stdout], [], [], STARTUP_S)  # bounded: never a hang
            assert ready and client.stdout.readline().strip() == "started", "the client did not start"
            time.sleep(0.5)  # well inside the generation
            os.kill(server.pid, signal.SIGKILL)
            killed = time.monotonic()
            _, err = client.communicate(timeout=30)
            ended = time.monotonic() - killed
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
    assert client.returncode == rpc.EXIT_RPC_LOST, err
    assert f"lost an RPC server ({endpoint})" in err, err
    assert ended < 10


# A client that loads the model over the server, generates, then idles, doing what stdin says.
IDLE_CLIENT = """
import sys, time
import plookup
from plookup.api.rpc_lost import lost_servers
from plookup.draft.policy import CPU_COST_CURVE

llm = plookup.Llama(sys.argv[1], rpc_servers=sys.argv[2], n_ctx=512, n_threads=1, n_threads_batch=1,
                    verbose=False, cost_curve=CPU_COST_CURVE, exactness=None)
llm.create_completion("1, 2, 3,", max_tokens=4, temperature=0)
print("idle", flush=True)
for line in sys.stdin:
    if line.strip() == "lost":
        deadline = time.monotonic() + 10
        while not lost_servers([sys.argv[2]]) and time.monotonic() < deadline:
            time.sleep(0.1)
        print("lost", lost_servers([sys.argv[2]]), flush=True)
    elif line.strip() == "close":
        print("closed", llm.close(), flush=True)
    elif line.strip() == "exit":
        break
"""


def idle_client(model: str, endpoint: str) -> subprocess.Popen:
    client = subprocess.Popen([sys.executable, "-c", IDLE_CLIENT, model, endpoint], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([client.stdout], [], [], STARTUP_S)  # bounded: never a hang
    assert ready and client.stdout.readline().strip() == "idle", "the client did not start"
    return client


def told(client: subprocess.Popen, command: str, within: float = 30) -> str:
    client.stdin.write(command + "\n")
    client.stdin.flush()
    ready, _, _ = select.select([client.stdout], [], [], within)
    assert ready, f"no answer to {command!r} within {within} s"
    return client.stdout.readline().strip()


@pytest.mark.budget(90)
@pytest.mark.parametrize("then", ["close", "exit"])
def test_a_server_lost_while_idle_is_found_and_never_hangs_the_close_or_the_exit(model_path, then):
    """llama.cpp's RPC client waits forever for a lost server's reply when it frees the model's
    buffers (rpc_dispatcher::send): plookup frees on a thread and gives up after FREE_TIMEOUT_S,
    naming the server, at close() and at the interpreter's exit alike."""
    with rpc_server() as (endpoint, server):
        client = idle_client(model_path["smollm2"], endpoint)
        try:
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
            assert told(client, "lost") == f"lost ['{endpoint}']"
            start = time.monotonic()
            out, err = client.communicate(("close\n" if then == "close" else "") + "exit\n", timeout=30)
            assert time.monotonic() - start < 30
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
    # The free either ends (the connection's end found at once: llama.cpp's client aborts, and the
    # process exits with EXIT_RPC_LOST naming the server) or is given up after FREE_TIMEOUT_S.
    assert client.returncode in (0, rpc.EXIT_RPC_LOST), err
    if client.returncode == rpc.EXIT_RPC_LOST:
        assert f"lost an RPC server ({endpoint})" in err, err
    elif then == "close":
        assert "closed" in out, out


@pytest.mark.budget(120)
def test_serve_answers_its_in_flight_request_503_naming_the_lost_server_and_exits_for_a_restart(model_path):
    import threading
    import urllib.error
    import urllib.request

    from conftest import serving

    with rpc_server() as (endpoint, server):
        with serving("smol", "--rpc", endpoint, "--threads", "1", *UNDRAFTED) as (url, serve):
            answer: dict = {}

            def ask():
                body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 1.0,
                                   "ignore_eos": True}).encode()
                request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        answer.update(status=response.status, body=json.load(response))
                except urllib.error.HTTPError as e:
                    answer.update(status=e.code, body=json.load(e))
                except OSError as e:  # a dropped connection
                    answer.update(status=None, body=str(e))

            asking = threading.Thread(target=ask)
            asking.start()
            deadline = time.monotonic() + 30
            while "plookup_steps_total 1" not in urllib.request.urlopen(f"{url}/metrics").read().decode():
                assert time.monotonic() < deadline, "the generation never got under way"
                time.sleep(0.05)
            os.kill(server.pid, signal.SIGKILL)  # mid-generation
            asking.join(30)
            assert not asking.is_alive(), "the request was never answered"
            assert answer["status"] == 503, answer
            assert endpoint in answer["body"]["error"]["message"] and answer["body"]["error"]["code"] == "rpc_server_lost"
            assert serve.wait(timeout=30) == rpc.EXIT_RPC_LOST  # a supervisor restarts it


@pytest.mark.budget(90)
def test_serve_whose_server_is_lost_while_idle_says_so_and_exits_for_a_restart(model_path):
    import urllib.error
    import urllib.request

    from conftest import serving

    with rpc_server() as (endpoint, server):
        with serving("smol", "--rpc", endpoint, "--threads", "1", *UNDRAFTED) as (url, serve):
            os.kill(server.pid, signal.SIGKILL)
            health = None
            deadline = time.monotonic() + 10
            while health is None and time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=5)
                    time.sleep(0.1)
                except urllib.error.HTTPError as e:
                    health = (e.code, json.load(e))
                except OSError:  # the watch already shut it down
                    break
            if health is not None:
                assert health[0] == 503 and endpoint in health[1]["error"]["message"], health
            assert serve.wait(timeout=30) == rpc.EXIT_RPC_LOST
