"""`plookup serve`: the OpenAI-compatible HTTP server on the command line (the app is in `app`).
It takes llama-server's command line too (plookup.app.llama_cli): its spellings, presets and
LLAMA_ARG_* variables, and refuses by name what plookup cannot honour."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time

from .. import llama_cli
from ... import log
from ...draft.sizing import LLAMA_SERVER_N_BATCH
from ...api.rpc import EXIT_RPC_LOST
from ...api.rpc_lost import lost_servers
from ...api.measured import take_over
from ...api.background import DEADLINE_ENV, Measurement, spec_of
from ..options import add_drafter_option, add_model_options, load_llama, load_scopes, save_memory
from .limits import ANY_ORIGIN, Limits

API_KEY_ENV = "PLOOKUP_API_KEY"
DEFAULT_PORT = 8080  # llama-server's, which editors' and clients' READMEs assume


def register(commands) -> None:
    serve = commands.add_parser(
        "serve", help="HTTP server: OpenAI's /v1/completions, /v1/chat/completions, /v1/models; llama-server's "
                      "/completion, /infill, /tokenize, /detokenize, /apply-template, /props, /slots; /metrics, /health",
        description="Takes llama-server's command line too (its -m, -c, -np, -ngl, -fa, presets, LLAMA_ARG_* "
                    "variables, ...); a llama-server flag plookup cannot honour is refused by name.",
        usage="plookup serve [options]  (plookup serve --help lists them)",  # a bad value's error, in 2 lines
    )
    add_model_options(serve)
    add_drafter_option(serve, memory_by_default=True)
    limits = Limits()
    serve.add_argument("--host", type=llama_cli.host, default="127.0.0.1",
                       help="address to listen on, or a UNIX socket path ending in .sock (default 127.0.0.1: this "
                            "machine only; see README before binding elsewhere)")
    serve.add_argument("--port", type=llama_cli.port, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    serve.add_argument("-a", "--alias", "--model-alias", dest="model_alias", action=llama_cli.Alias, metavar="NAME",
                       help="the model id clients send (default: the GGUF file's name)")
    serve.add_argument("--api-key", dest="api_key", action=llama_cli.Keys, type=llama_cli.api_keys, metavar="KEY[,KEY]",
                       help=f"require Authorization: Bearer KEY, any of these, on every route but /health (default: "
                            f"${API_KEY_ENV}; repeatable)")
    serve.add_argument("--api-key-file", dest="api_key", action=llama_cli.Keys, type=llama_cli.api_key_file,
                       metavar="FILE", help="as --api-key, a key a line (lines starting with # left out)")
    # llama-server's $LLAMA_API_KEY and $LLAMA_ARG_API_KEY_FILE (cli.parse gives them as these).
    serve.add_argument("--env-api-key", dest="env_api_key", action=llama_cli.Keys, type=llama_cli.api_keys,
                       help=argparse.SUPPRESS)
    serve.add_argument("--env-api-key-file", dest="env_api_key", action=llama_cli.Keys, type=llama_cli.api_key_file,
                       help=argparse.SUPPRESS)
    serve.add_argument("--cors-origins", metavar="ORIGIN[,ORIGIN]", type=origins, default=ANY_ORIGIN,
                       help="browser pages from these origins may call the server, e.g. http://localhost:5173, "
                            "localhost (this machine's pages), none (same-origin only) (default *: any, as "
                            "llama-server)")
    serve.add_argument("--max-body-bytes", type=int, default=limits.max_body_bytes,
                       help=f"largest request body, else 413 (default {limits.max_body_bytes})")
    serve.add_argument("--max-prediction-tokens", type=int, default=limits.max_prediction_tokens,
                       help=f"largest Predicted Output, else 400 (default {limits.max_prediction_tokens})")
    serve.add_argument("-np", "--parallel", type=llama_cli.parallel, default=1, metavar="N",
                       help="generations decoded at once, each on a slot with the whole -c window "
                            "(the KV cache holds N x n-ctx cells); requests beyond them queue (default 1: "
                            "one at a time, exact where `plookup doctor` says so)")
    serve.add_argument("--max-queue", type=int, default=limits.max_queue,
                       help=f"requests waiting for the model, else 429 (default {limits.max_queue})")
    serve.add_argument("--calibration", choices=("background", "blocking", "none"), default="background",
                       help="where the model's exactness and verify-cost curve are not measured yet for these "
                            "settings: background (default) serves at once, without drafts, while a process of "
                            "its own measures them (stopped while requests run; /health says \"calibration\": "
                            "\"measuring\"), blocking measures them before serving (a benchmark's choice); none "
                            "measures nothing, cached or not: drafts sized by the built-in curve of a 2-core CPU, "
                            "no exactness probe (usage says \"exact\": null; for scripts and tests that start "
                            "servers often)")
    llama_cli.add_server_flags(serve)
    # llama-server's default batch, which also sizes its FIM prompts (plookup.api.fim), and its
    # flash attention (-fa auto: on where the backend has the kernel), so that beside llama-server
    # both run the same kernels
    serve.set_defaults(func=cmd_serve, n_batch=LLAMA_SERVER_N_BATCH, flash_attn="auto")


def origins(text: str) -> tuple[str, ...]:
    """--cors-origins: a comma-separated list of origins (scheme://host[:port]), "*", "localhost",
    or "none"."""
    if text.strip() == "none":
        return ()
    found = tuple(origin.strip().rstrip("/") for origin in text.split(",") if origin.strip())
    if not found:
        raise argparse.ArgumentTypeError("give at least one origin, e.g. http://localhost:5173")
    return found


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The keys a request may give: the command line's, else llama-server's $LLAMA_API_KEY and
    $LLAMA_ARG_API_KEY_FILE's, else $PLOOKUP_API_KEY's (comma-separated too)."""
    if args.api_key or args.env_api_key:
        return tuple(args.api_key or args.env_api_key)
    given = os.environ.get(API_KEY_ENV)
    return tuple(llama_cli.api_keys(given)) if given and given.strip(", ") else ()


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # here, so that the other subcommands do not load the web stack

    started = time.monotonic()
    from .app import create_app

    for name in ("max_body_bytes", "max_prediction_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_queue < 0:
        raise ValueError("--max-queue must be >= 0")
    llama_cli.settle(args)
    if args.draft_min:  # TODO(create_app): a server-wide speculative.n_min
        llama_cli.add_note(args, f"--draft-min {args.draft_min}: plookup drafts what pays by its cost curve; a "
                                 f"request's speculative.n_min sets a shortest draft for that request")
    for note in dict.fromkeys(args.llama_notes or ()):
        print(f"plookup serve: {note}", file=sys.stderr, flush=True)
    keys = api_keys(args)
    # requests run on the pool's threads; what is not measured yet for this model and its settings
    # is measured in the background (BackgroundFigures), except over RPC (its servers serve one client)
    llm = load_llama(args, parallel=args.parallel, decode_thread=True,
                     calibration="blocking" if args.rpc and args.calibration == "background" else args.calibration)
    if args.cache_reuse:
        try:
            llm.cache_reuse = args.cache_reuse
        except ValueError as e:  # as llama-server, which turns it off where the cache cannot shift
            print(f"plookup serve: --cache-reuse off: {e}", file=sys.stderr)
    if args.chat_template:
        llama_cli.use_chat_template(llm, args.chat_template)
    limits = Limits(args.max_body_bytes, args.max_prediction_tokens, args.max_queue, n_predict=args.n_predict)
    lost = threading.Event()  # set once an RPC server holding layers is lost (watch_rpc)

    figures = BackgroundFigures.of(llm, started, args.quiet)

    def keep_memory() -> None:
        # In the app's shutdown: uvicorn raises a SIGINT or SIGTERM again once it has shut down,
        # so nothing after server.run() runs then. A lost RPC server keeps nothing (the model
        # cannot be freed; a supervisor restarts the server).
        if figures is not None:
            figures.stop()
        if not lost.is_set():
            save_memory(args, llm, app.state.memories)

    template = None if not args.chat_template else args.chat_template[1] if args.chat_template[0] == "jinja" else ""
    app = create_app(llm, args.model_alias or os.path.basename(llm.model_path), limits, keys, args.cors_origins,
                     on_shutdown=keep_memory, chat_template=template,
                     on_startup=lambda: figures.start(app) if figures is not None else None)
    load_scopes(args, llm.model_path, app.state.memories)
    place = dict(uds=args.host) if args.host.endswith(".sock") else dict(host=args.host, port=args.port)
    server = uvicorn.Server(uvicorn.Config(app, **place))
    watch_rpc(llm, server, lost)
    where = args.host if "uds" in place else f"http://{args.host}:{args.port}"
    log.log.info("ready: serving %s at %s (%.1f s since the start)", app.state.model_name, where, time.monotonic() - started)
    server.run()  # returns once an RPC server is lost; on SIGINT or SIGTERM, uvicorn re-raises the signal
    return EXIT_RPC_LOST if lost.is_set() else 0


def watch_rpc(llm, server, lost: threading.Event, every_s: float = 2.0) -> None:
    """Set `lost` once one of the model's RPC servers is lost while the server idles (mid-generation
    ggml's client exits the process itself, plookup.api.rpc): the server then shuts down, /health
    saying why meanwhile (plookup.app.serve.lost)."""
    endpoints = getattr(getattr(llm, "rpc_devices", None), "endpoints", None)
    if not endpoints:
        return

    def watch():
        while not server.should_exit:
            gone = lost_servers(endpoints)
            if gone:
                print(f"plookup serve: lost the RPC server {', '.join(gone)}; exiting with status {EXIT_RPC_LOST} "
                      f"for a restart", file=sys.stderr, flush=True)
                lost.set()
                server.should_exit = True
                return
            time.sleep(every_s)

    threading.Thread(target=watch, name="plookup-rpc-watch", daemon=True).start()


class BackgroundFigures:
    """The served model's figures (exactness, verify-cost curve) measured while it serves: a
    :class:`~plookup.api.background.Measurement` started with the server, stopped while a
    generation runs and resumed when the model idles, and the figures it cached applied at the
    first moment the model idles after it (inside the gate's hook: no generation runs, none
    waits longer than applying them takes), with a line in the log. Until then /health says
    "calibration": "measuring" and the model decodes plainly."""

    def __init__(self, llm, measurement: Measurement, started: float):
        self.llm, self.measurement, self.started = llm, measurement, started
        self.app = self.loop = None
        self.ready = False  # measured: taken over when the model next idles

    @classmethod
    def of(cls, llm, started: float, quiet: bool) -> "BackgroundFigures | None":
        """None where the model waits for nothing; where it cannot be measured in the background,
        measured here now, as a blocking load would."""
        pending = getattr(llm, "calibration_pending", None)
        if pending is None:
            return None
        spec = spec_of(pending, quiet)
        if spec is None:
            take_over(llm, measure=True)
            return None
        return cls(llm, Measurement(spec), started)

    def start(self, app) -> None:
        """On the server's event loop, as it starts."""
        self.app, self.loop = app, asyncio.get_running_loop()
        app.state.calibration = "measuring"
        app.state.gate.on_busy = self.busy
        self.measurement.start()
        log.log.info("measuring what is not cached yet (the %s, ...) in the background, in a process of its "
                     "own stopped while requests run: serving without drafts until then",
                     self.llm.calibration_pending.missing)
        threading.Thread(target=self.watch, name="plookup-figures", daemon=True).start()

    def busy(self, busy: bool) -> None:
        """The gate's hook (on the event loop): the measurement stopped while a generation runs,
        resumed (or its figures taken over) when the model idles."""
        try:
            if busy:
                self.measurement.pause()
                return
            if self.ready:
                self.take_over()
            self.measurement.resume()
        except Exception as e:  # never in a request's way
            print(f"plookup serve: the background measurement: {e!r}", file=sys.stderr, flush=True)

    def watch(self) -> None:
        measured = self.measurement.wait()
        try:
            self.loop.call_soon_threadsafe(self.ended, measured)
        except RuntimeError:  # the server has shut down
            pass

    def ended(self, measured: bool) -> None:
        """(on the event loop) Taken over now where the model idles, else when it next does."""
        if not measured:
            process = self.measurement.process
            why = (f"gave up after {self.measurement.deadline:.0f} s of running (${DEADLINE_ENV})"
                   if self.measurement.gave_up else f"failed (exit status {process.returncode})")
            self.give_up(f"the background measurement {why}")
            return
        self.ready = True
        if self.app.state.gate.held == 0:
            self.take_over()

    def take_over(self) -> None:
        self.ready = False
        self.app.state.gate.on_busy = lambda busy: None
        line = take_over(self.llm)
        if line is None:
            self.give_up(f"the background measurement ended without the {self.llm.calibration_pending.missing}")
            return
        self.app.state.calibration = None
        log.log.info("measured figures take over %.1f s after the start (%.1f s of measuring): %s",
                     time.monotonic() - self.started, self.measurement.ran_s, line)

    def give_up(self, why: str) -> None:
        self.app.state.gate.on_busy = lambda busy: None
        self.app.state.calibration = "not measured"
        log.log.warning("%s: serving without drafts; the next start measures again (or run `plookup doctor`)", why)

    def stop(self) -> None:
        self.measurement.stop()
