"""llama.cpp's own model-free drafters, through a `llama-server` binary, as systems of `plookup
bench`'s comparisons: ``python -m benchmarks.servers`` runs plookup bench with them beside the
engine's systems (see __main__).

The server is started on 127.0.0.1 at a free port with the bench's model, context and threads, one
slot (``-np 1``) or, for ``--concurrency``, as many as clients (each with the whole n_ctx, as
plookup's slots have); each run POSTs the prompt tokens to /completion with prompt caching off and
reads the server's own timings and draft counters, or, streamed (:meth:`ServerSystem.stream`), the
time each token reached the client.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
import urllib.request
from typing import Optional, Sequence

from plookup.api.stats import SpecStats
from plookup.app.bench.local_server import free_port, stop, wait_healthy
from plookup.app.bench.systems import run_record

# The single-stream comparison's llama-server systems, and the concurrency run's: decoding plainly
# (None) and its model-free drafters.
SPEC_TYPES = ("ngram-mod", "ngram-map-k")
SERVER_SPEC_TYPES = ("ngram-mod", "ngram-simple")  # --server-spec-types' default
SWEEPABLE_SPEC_TYPES = ("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v")  # those draft_max_flags can size
STARTUP_SECONDS = 120


def find_llama_server(path: Optional[str]) -> Optional[str]:
    return shutil.which(path) if path else shutil.which("llama-server")


def _peak_rss_mib(pid: int) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class ServerSystem:
    """`spec_type` None: the server decodes without drafting; `extra_flags` go to llama-server as
    they are (e.g. `--rpc HOST:PORT`)."""

    def __init__(self, binary: str, spec_type: Optional[str], model_kwargs: dict, eos_token: int, slots: int = 1,
                 draft_max: Optional[int] = None, extra_flags: Sequence[str] = (), started: bool = True):
        self.name = f"server-{spec_type or 'plain'}" + (f"-{draft_max}" if draft_max else "")
        self.eos_token = eos_token
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        threads = str(model_kwargs["n_threads"])
        flags = ["--spec-type", spec_type] if spec_type else []
        flags += draft_max_flags(spec_type, draft_max) if draft_max else []
        # llama_cpp's default is off, the server's auto (on here): the same for both.
        flags += ["-fa", "on" if model_kwargs.get("flash_attn") else "off"]
        self.argv = [binary, "-m", model_kwargs["model_path"], "--host", "127.0.0.1", "--port", str(port),
                     "-c", str(slots * model_kwargs["n_ctx"]), "-t", threads, "-tb", threads, "-np", str(slots),
                     *flags, *extra_flags]
        self.process: Optional[subprocess.Popen] = None
        if started:
            self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(self.process, self.url, f"{self.name}: llama-server", STARTUP_SECONDS)
        except RuntimeError:
            self.close()
            raise

    def restart(self) -> None:
        """A fresh server on the same port: nothing kept from earlier requests (ngram-mod's pool of
        n-grams is shared by every slot and kept from request to request until it fills a
        quarter of its table; a benchmark's repeats send the same prompts again)."""
        self.close()
        self.start()

    def completion_request(self, prompt: Sequence[int], max_tokens: int, **options) -> urllib.request.Request:
        """A /completion request for the prompt's tokens, prompt caching off."""
        body = dict(prompt=list(map(int, prompt)), n_predict=max_tokens, cache_prompt=False, return_tokens=True,
                    **options)
        return urllib.request.Request(
            f"{self.url}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )

    def run(self, prompt: Sequence[int], max_tokens: int) -> dict:
        request = self.completion_request(prompt, max_tokens, temperature=0.0, top_k=1)
        start = time.perf_counter()
        with urllib.request.urlopen(request) as r:
            reply = json.load(r)
        total = time.perf_counter() - start
        return server_record(reply, total, self.eos_token, _peak_rss_mib(self.process.pid))

    def stream(self, prompt: Sequence[int], max_tokens: int, temperature: float, seed: int,
               through_eog: bool = False) -> dict:
        """One streamed request of up to `max_tokens` tokens: the time each token reached the
        client, the end-of-generation token included (the server does not send it);
        `through_eog`: on past end-of-generation tokens (llama-server's ignore_eos)."""
        request = self.completion_request(prompt, max_tokens, temperature=temperature, seed=seed, stream=True,
                                   ignore_eos=through_eog)
        start, times = time.perf_counter(), []
        with urllib.request.urlopen(request) as r:
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                chunk = json.loads(line[len(b"data: ") :])
                now = time.perf_counter()
                times += [now] * len(chunk.get("tokens") or ())
                if chunk.get("stop") and chunk.get("stop_type") == "eos":
                    times.append(now)
        return dict(start=start, times=times[:max_tokens], forward_passes=None, accepted=None)

    def close(self) -> None:
        if self.process is not None:
            stop(self.process, 10)


# How long llama-server's n-gram drafts may be, by spec type (its defaults: ngram-mod 48-64,
# ngram-simple 48); --draft-max is gone from this llama.cpp.
def draft_max_flags(spec_type: str, draft_max: int) -> list[str]:
    if spec_type == "ngram-mod":
        return ["--spec-ngram-mod-n-max", str(draft_max), "--spec-ngram-mod-n-min", str(min(draft_max, 48))]
    if spec_type in SWEEPABLE_SPEC_TYPES:
        return [f"--spec-{spec_type}-size-m", str(draft_max)]
    raise ValueError(f"no draft length to set for llama-server's {spec_type}")


def server_record(reply: dict, total_s: float, eos_token: int, rss_mib: Optional[float]) -> dict:
    """A run record from a /completion reply; the server omits the end-of-generation token that
    the other systems report, so it is put back."""
    tokens = list(reply.get("tokens", []))
    if reply.get("stop_type") == "eos":
        tokens.append(eos_token)
    timings = reply["timings"]
    prefill = timings["prompt_ms"] / 1000
    per_token = timings["predicted_ms"] / 1000 / max(1, timings["predicted_n"])
    stats = SpecStats(drafted=timings.get("draft_n", 0), accepted=timings.get("draft_n_accepted", 0))
    stats.forward_passes = None  # the server does not report its verify steps
    return run_record(tokens, prefill, prefill + per_token, total_s, stats, rss_mib)


def server_systems(draft_max: Optional[str], spec_types: Optional[str] = None) -> list[tuple[Optional[str], Optional[int]]]:
    """(spec type, --draft-max) of each llama-server system of a concurrency level: plain, and each
    n-gram drafter of the comma-separated `spec_types` (default SERVER_SPEC_TYPES) with each of the
    comma-separated --server-draft-max values (None: the server's default)."""
    values = [int(v) for v in draft_max.split(",")] if draft_max else [None]
    if any(v is not None and v < 1 for v in values):
        raise ValueError(f"--server-draft-max: positive integers, got {draft_max!r}")
    types = spec_types.split(",") if spec_types else list(SERVER_SPEC_TYPES)
    unknown = [t for t in types if t not in SWEEPABLE_SPEC_TYPES]
    if unknown:
        raise ValueError(f"--server-spec-types: of {', '.join(SWEEPABLE_SPEC_TYPES)}, got {spec_types!r}")
    return [(None, None)] + [(spec, v) for spec in types for v in values]


class LlamaServers:
    """llama-server's systems, as `plookup bench`'s comparisons take systems run outside their
    process (plookup.app.bench.command.cmd_bench's `servers`): `binary`, and for --concurrency the
    longest drafts of its n-gram drafters (`draft_max`, --server-draft-max's list), checked here,
    before any model loads."""

    prog = "python -m benchmarks.servers"

    def __init__(self, binary: str, draft_max: Optional[str] = None, note=print, spec_types: Optional[str] = None):
        self.binary, self.draft_max, self.note = binary, draft_max, note
        self.level_systems = server_systems(draft_max, spec_types)

    def single_stream(self, kwargs: dict, eos: int) -> list:
        """A callable starting each system of the single-stream comparison, its layers where
        plookup's loads put them (-ngl); over RPC servers with llama-server's own --rpc."""
        from plookup.api.load import gpu_layers

        servers = kwargs.get("rpc_servers")
        layers = gpu_layers(kwargs.get("n_gpu_layers", "auto"), bool(servers))  # as plookup's loads place them
        flags = ["--rpc", ",".join(servers)] if servers else []
        flags += ["-ngl", str(layers if layers >= 0 else 999)]  # (llama-server's -1 is its own "auto")

        def start(spec_type):
            self.note(f"starting llama-server --spec-type {spec_type}")
            return ServerSystem(self.binary, spec_type, kwargs, eos, extra_flags=flags)

        return [functools.partial(start, spec_type) for spec_type in SPEC_TYPES]

    def level(self, kwargs: dict, eos: int, clients: int) -> list:
        """The systems of a concurrency level, each with `clients` slots, none started: the bench
        starts each afresh for its run and stops it after (:meth:`ServerSystem.restart`), so that
        no idle server holds its model's memory while the others run."""
        return [ServerSystem(self.binary, spec, kwargs, eos, slots=clients, draft_max=draft_max, started=False)
                for spec, draft_max in self.level_systems]
