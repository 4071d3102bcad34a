"""llama-server as systems of `plookup bench`'s comparisons (benchmarks/servers): its replies as
run records, its systems' flags, a restart, and the command line, with fakes (no model, no
llama-server: a stand-in binary where one must run)."""

from __future__ import annotations

import sys

import pytest

from benchmarks.servers import llama_server
from benchmarks.servers.__main__ import main as servers_main
from benchmarks.servers.__main__ import parser
from benchmarks.servers.llama_server import LlamaServers, ServerSystem, server_record, server_systems
from plookup.app.options import model_kwargs


def test_server_reply_becomes_a_run_record_with_the_eos_put_back():
    reply = {
        "tokens": [5, 6, 7], "stop_type": "eos",
        "timings": {"prompt_ms": 200.0, "predicted_ms": 300.0, "predicted_n": 3, "draft_n": 4, "draft_n_accepted": 2},
    }
    r = server_record(reply, total_s=0.6, eos_token=2, rss_mib=50.0)
    assert r["tokens"] == [5, 6, 7, 2] and r["prefill_s"] == 0.2 and r["ttft_s"] == pytest.approx(0.3)
    assert (r["drafted"], r["accepted"], r["forward_passes"]) == (4, 2, None)


def test_bench_starts_llama_server_with_the_layers_where_plookup_puts_them(monkeypatch):
    started = []
    monkeypatch.setattr(llama_server, "ServerSystem", lambda *a, extra_flags: started.append(extra_flags))
    args = parser().parse_args(["-m", "smollm2", "-ngl", "5"])
    for start in LlamaServers("llama-server", note=lambda m: None).single_stream(model_kwargs(args), eos=2):
        start()
    assert started and all(flags == ["-ngl", "5"] for flags in started)


def test_server_draft_max_is_checked_before_a_model_loads(tmp_path, capsys):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    argv = ["-m", "no-such-model.gguf", "--concurrency", "1", "--server-draft-max", "16,0", "--llama-server", str(binary)]
    assert servers_main(argv) == 1
    err = capsys.readouterr().err
    assert "--server-draft-max" in err and "no-such-model" not in err


def test_without_a_llama_server_binary_nothing_runs(tmp_path, capsys):
    assert servers_main(["-m", "no-such-model.gguf", "--llama-server", str(tmp_path / "missing")]) == 1
    assert "not found" in capsys.readouterr().err


def test_server_systems_sweep_draft_max_for_each_ngram_drafter():
    assert server_systems(None) == [(None, None), ("ngram-mod", None), ("ngram-simple", None)]
    assert server_systems("16,64") == [(None, None), ("ngram-mod", 16), ("ngram-mod", 64),
                                       ("ngram-simple", 16), ("ngram-simple", 64)]
    assert server_systems("32", "ngram-map-k,ngram-mod") == [(None, None), ("ngram-map-k", 32), ("ngram-mod", 32)]
    for wrong in ("ngram-cache", "ngram-mod,", "draft"):  # ngram-cache has no length to set
        with pytest.raises(ValueError, match="--server-spec-types"):
            server_systems("16", wrong)


FAKE_SERVER = '''#!/usr/bin/env python3
import http.server, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
'''
# the model settings a stand-in server is started with
KWARGS = dict(model_path="m.gguf", n_threads=2, n_ctx=512)


@pytest.fixture
def fake_binary(tmp_path) -> str:
    """A stand-in llama-server answering /health with its pid (CI builds no llama-server)."""
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER.replace("#!/usr/bin/env python3", f"#!{sys.executable}"))
    binary.chmod(0o755)
    return str(binary)


def test_a_restarted_llama_server_is_a_fresh_process_on_the_same_address(fake_binary):
    """What the concurrency bench does before each of llama-server's runs, so that no run drafts
    from the n-gram pool of the runs before it: the old process is gone, a new one answers at the
    same URL with the same flags."""
    import urllib.request

    server = ServerSystem(fake_binary, "ngram-mod", KWARGS, eos_token=2, slots=4, draft_max=64)
    try:
        first = server.process
        with urllib.request.urlopen(f"{server.url}/health") as r:
            assert int(r.read()) == first.pid
        argv = list(server.argv)
        server.restart()
        assert first.poll() is not None  # the old one ended
        with urllib.request.urlopen(f"{server.url}/health") as r:
            assert int(r.read()) == server.process.pid != first.pid
        assert server.process.args == argv and "--spec-ngram-mod-n-max" in argv and argv[argv.index("-np") + 1] == "4"
    finally:
        server.close()
    assert server.process.poll() is not None


def test_a_levels_servers_start_only_for_their_runs(fake_binary):
    """A concurrency level's llama-servers are made unstarted (a sweep's ten idle servers held
    ten models in memory): the bench starts each for its run and stops it after."""
    servers = LlamaServers(fake_binary, draft_max="16,64", note=lambda m: None).level(KWARGS, eos=2, clients=4)
    assert len(servers) > 2 and all(s.process is None for s in servers)
    server = servers[-1]
    try:
        server.restart()
        assert server.process.poll() is None
    finally:
        server.close()
    assert server.process.poll() is not None
    servers[0].close()  # never started: nothing to stop
