"""A model's figures (the exactness probe, the verify-cost curve) measured in a process of its own
while the model already serves: ``plookup serve`` loads its model with
``plookup.Llama(calibration="background")``, which drafts nothing until they are cached
(:mod:`plookup.api.measured`), and starts a :class:`Measurement` that writes the very cache files a
blocking load would have (:mod:`plookup.measure.cache`), under the same keys.

The process loads the same model with the settings the keys are made of (threads, batch, ubatch,
flash attention, KV types, slots, the drafts' bound), its context only as large as the
measurements need. It is stopped (SIGSTOP) while the server generates, so that a request has the
cores to itself, and resumed when the server idles; a decode timed across a stop is timed again
(:func:`plookup.measure.costs.resumed`), and a curve whose timings moved anyway is measured again
or kept with a warning, as at a blocking load. It gives up once it has run for
:data:`DEFAULT_DEADLINE_S` (``$PLOOKUP_CALIBRATION_DEADLINE_S``) however loaded the machine: the
model then keeps decoding plainly, and the next start measures again.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

DEADLINE_ENV = "PLOOKUP_CALIBRATION_DEADLINE_S"
DEFAULT_DEADLINE_S = 600.0  # running time; a busy machine's blocking first start measured for 540 s
LLAMA_CPP_N_CTX, LLAMA_CPP_N_BATCH = 512, 512  # llama_cpp.Llama's defaults
CONTEXT_STEP = 256


def deadline_s() -> float:
    value = os.environ.get(DEADLINE_ENV)
    try:
        return float(value) if value else DEFAULT_DEADLINE_S
    except ValueError:
        raise ValueError(f"${DEADLINE_ENV} must be a number of seconds, got {value!r}") from None


def measuring_n_ctx(n_ctx: int, n_batch: int, max_draft: int, parallel: int) -> int:
    """The context a measuring process loads the model with: what the probes and the curve decode
    (their context of CONTEXT_TOKENS and their largest batches, :mod:`.exactness` and :mod:`.costs`),
    and at least n_batch (llama_cpp caps n_batch, which the keys hold, by n_ctx); never more than
    the server's own `n_ctx` (0: the model's), whose limits the measurements then had anyway."""
    from ..measure.costs import CONTEXT_TOKENS, curve_rows
    from ..measure.exactness import EXACT_MIN_ROWS

    probe_rows = max(EXACT_MIN_ROWS, max_draft + 1)
    need = max(curve_rows(max_draft, parallel) + CONTEXT_TOKENS, 2 * probe_rows + 2 * CONTEXT_TOKENS, n_batch)
    need = -(-need // CONTEXT_STEP) * CONTEXT_STEP
    return need if n_ctx <= 0 else min(n_ctx, need)


def spec_of(pending, quiet: bool) -> Optional[dict]:
    """What the measuring process loads and measures for a model's :class:`plookup.api.measured.Pending`,
    as JSON; None where it cannot (positional arguments or values JSON cannot carry; layers on RPC
    servers, which serve one client)."""
    load = pending.load
    kwargs = dict(load.get("kwargs", {}))
    if not load or kwargs.get("rpc_servers") or load.get("args"):
        return None
    kwargs.update(verbose=False, backend_sampling=False)
    kwargs["n_ctx"] = measuring_n_ctx(kwargs.get("n_ctx", LLAMA_CPP_N_CTX), kwargs.get("n_batch", LLAMA_CPP_N_BATCH),
                                      pending.max_draft, load["parallel"])
    spec = dict(model_path=load["model_path"], kwargs=kwargs, parallel=load["parallel"],
                use_extra_bufts=load.get("use_extra_bufts"), max_draft=pending.max_draft,
                exactness=pending.exactness, cost_curve="auto" if isinstance(pending.cost_curve, str) else None,
                parent=os.getpid(), quiet=quiet)
    try:
        return json.loads(json.dumps(spec))
    except (TypeError, ValueError):
        return None


class Measurement:
    """The measuring process for one model: started, stopped and resumed, and ended at its deadline.

    :meth:`pause` and :meth:`resume` may be called from any thread (the server's event loop);
    :meth:`wait` blocks until the process has ended and says how."""

    def __init__(self, spec: dict, deadline: Optional[float] = None):
        self.spec = spec
        self.deadline = deadline_s() if deadline is None else deadline
        self.process: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self._paused_at: Optional[float] = None
        self._paused_s = 0.0
        self._started = 0.0
        self.gave_up = False
        self.ran_s = 0.0  # seconds it ran (not stopped), once it has ended

    def start(self) -> None:
        self._started = time.monotonic()
        # A session of its own: a Ctrl-C meant for the server does not reach it (the server ends
        # it, and it ends with the server: _die_with_parent).
        self.process = subprocess.Popen([sys.executable, "-m", __name__, json.dumps(self.spec)],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            if self._paused_at is not None:  # the server was busy already
                self._signal(signal.SIGSTOP)

    def running_s(self) -> float:
        """Seconds it has been let run (not stopped)."""
        with self._lock:
            paused = self._paused_s + (time.monotonic() - self._paused_at if self._paused_at is not None else 0.0)
        return time.monotonic() - self._started - paused

    def _signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)

    def pause(self) -> None:
        with self._lock:
            if self._paused_at is None:
                self._paused_at = time.monotonic()
                self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        with self._lock:
            if self._paused_at is not None:
                self._paused_s += time.monotonic() - self._paused_at
                self._paused_at = None
                self._signal(signal.SIGCONT)

    def stop(self) -> None:
        """Ends the process (a stopped one too) and waits for it."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGKILL)
            self.process.wait()

    def wait(self, every_s: float = 0.5) -> bool:
        """Until the process has ended: True where it measured everything, False where it failed or
        ran past the deadline (:attr:`gave_up`), and was ended."""
        while True:
            try:
                measured = self.process.wait(timeout=every_s) == 0
                break
            except subprocess.TimeoutExpired:
                if self.running_s() > self.deadline:
                    self.gave_up = True
                    self.stop()
                    measured = False
                    break
        self.ran_s = self.running_s()
        return measured


def _die_with_parent(parent: int) -> None:
    """Killed once the server that started it is gone (Linux: PR_SET_PDEATHSIG), however it ends."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # gone before that was set
        os._exit(1)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    _die_with_parent(spec["parent"])
    from ..measure import costs
    from ..log import log

    signal.signal(signal.SIGCONT, costs.resumed)
    if spec["quiet"]:
        log.setLevel(logging.WARNING)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("plookup: in the background: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    from .llama import Llama

    llm = Llama(spec["model_path"], max_draft=spec["max_draft"], parallel=spec["parallel"],
                exactness=spec["exactness"], cost_curve=spec["cost_curve"], use_extra_bufts=spec["use_extra_bufts"],
                calibration="blocking", **spec["kwargs"])
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
