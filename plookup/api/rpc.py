"""A model split over several hosts with llama.cpp's RPC backend, from Python.

llama-cpp-python 0.3.36 accepts ``rpc_servers=`` and ignores it. This module does what llama.cpp's
``--rpc`` does, through the wheel's ggml (built with ``-DGGML_RPC=ON``): it asks the RPC backend for
each server's devices (``ggml_backend_rpc_add_server``, found through ggml's registry as llama.cpp
finds it) and hands them to llama.cpp as ``llama_model_params.devices``, a NULL-terminated array.
Only those devices take layers: the local CPU keeps the inputs, and any layers left off
``n_gpu_layers``, as with llama.cpp's own device list, which never names the CPU.

What ggml does when a server is missing (read in its source, ggml-rpc.cpp, and seen here): its
connect ends the whole process (``GGML_ABORT``) or waits without a bound, so each server is checked
first, with a socket of plookup's own (:mod:`plookup.api.rpc_check`: a server that cannot be used
is an :class:`~plookup.api.rpc_check.RpcError` naming it). A server lost later (mid-generation)
cannot be recovered from: ggml's dispatcher thread aborts. :func:`install_abort_hook` turns that
abort into a one-line message naming the servers and exit status :data:`EXIT_RPC_LOST` (instead
of SIGABRT after ggml's backtrace, which attaches a debugger where one is installed).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, Union

import llama_cpp
import llama_cpp.llama_cpp as llama_cpp_lib
from llama_cpp._ctypes_extensions import load_shared_library

from ..measure.settings import model_params
from .rpc_check import CHECK_TIMEOUT_S, RpcError, check_server, parse_servers
from .rpc_lost import BoundedClose, held, notify

REPACK_DEFAULT = True  # llama_model_default_params()' use_extra_bufts, which model_params sets too
EXIT_RPC_LOST = 75  # EX_TEMPFAIL: a server went away; ggml cannot go on without it

_lock = threading.Lock()
_live: dict[str, int] = {}  # endpoint -> models of this process connected to it


# --- ggml through ctypes ---------------------------------------------------------------------------

_ggml: Optional[ctypes.CDLL] = None


def ggml() -> ctypes.CDLL:
    """The wheel's libggml (its own handle, so these argtypes touch nobody else's)."""
    global _ggml
    if _ggml is None:
        lib = load_shared_library("ggml", llama_cpp_lib._base_path)
        vp = ctypes.c_void_p
        for name, restype, argtypes in (
            ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_reg_dev_count", ctypes.c_size_t, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, ctypes.c_size_t]),
            ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_set_abort_callback", vp, [vp]),
            ("ggml_print_backtrace", None, []),
        ):
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        _ggml = lib
    return _ggml


def rpc_reg() -> Optional[int]:
    """ggml's RPC backend registration, or None in a build without it (no -DGGML_RPC=ON)."""
    return ggml().ggml_backend_reg_by_name(b"RPC") or None


def available() -> bool:
    return rpc_reg() is not None


def _proc(name: str, prototype):
    reg = rpc_reg()
    if reg is None:
        raise RpcError("this llama_cpp has no RPC backend: build llama-cpp-python with -DGGML_RPC=ON "
                       "(`make install` does)")
    address = ggml().ggml_backend_reg_get_proc_address(reg, name.encode())
    if not address:
        raise RuntimeError(f"llama.cpp's RPC backend has no {name}")
    return prototype(address)


ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                ctypes.c_void_p)
GGML_BACKEND_DEVICE_TYPE_CPU = 0


# --- the client ----------------------------------------------------------------------------------


@dataclass
class RpcDevices:
    """The RPC servers' devices of one model: the NULL-terminated array llama.cpp reads at load
    (kept with the model), and the endpoints it holds connections to until :meth:`release`."""

    endpoints: list[str]
    devices: list[int]
    array: ctypes.Array = field(repr=False)
    released: bool = False

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)

    def release(self) -> None:
        with _lock:
            if not self.released:
                self.released = True
                for endpoint in self.endpoints:
                    _live[endpoint] -= 1


def connect(servers: Union[str, Sequence[str]], timeout: float = CHECK_TIMEOUT_S) -> RpcDevices:
    """Every server's devices, each server checked first (see :func:`.rpc_check.check_server`), except one
    that a model of this process is connected to already: ggml shares that connection, and the
    server would not answer a second one."""
    endpoints = parse_servers(servers)
    add_server = _proc("ggml_backend_rpc_add_server", ADD_SERVER)
    lib = ggml()
    devices = []
    with _lock:
        for endpoint in endpoints:
            if not _live.get(endpoint):
                check_server(endpoint, timeout)
        install_abort_hook()
        for endpoint in endpoints:
            reg = add_server(endpoint.encode())  # connects (and aborts on failure: checked above)
            count = lib.ggml_backend_reg_dev_count(reg) if reg else 0
            if not count:
                raise RpcError(f"RPC server {endpoint}: offers no device")
            devices += [lib.ggml_backend_reg_dev_get(reg, i) for i in range(count)]
        for endpoint in endpoints:
            _live[endpoint] = _live.get(endpoint, 0) + 1
    array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
    return RpcDevices(endpoints, devices, array)


def live_servers() -> list[str]:
    with _lock:
        return [endpoint for endpoint, n in _live.items() if n]


def rpc_kwargs(kwargs: dict) -> dict:
    """llama_cpp.Llama's kwargs for a model over RPC: every layer on the servers unless
    ``n_gpu_layers`` says how many (the rest, the first ones, stay on the local CPU)."""
    kwargs = dict(kwargs)
    if kwargs.setdefault("n_gpu_layers", -1) == 0:
        raise ValueError("rpc_servers with n_gpu_layers=0 would put no layer on the servers")
    return kwargs


@contextlib.contextmanager
def loading_onto(servers, repack: bool = REPACK_DEFAULT) -> Iterator[RpcDevices]:
    """Inside the block llama.cpp loads a model's layers onto the servers' devices (connected
    first: an RpcError naming a server it cannot use); they are released if the load fails, and
    are then attached to the model it made (:func:`attach`)."""
    devices = connect(servers)
    try:
        with model_params(repack, devices.address):
            yield devices
    except BaseException:
        devices.release()
        raise


def load_over_rpc(factory, servers, **kwargs):
    """``factory(**kwargs)`` (a llama_cpp.Llama or a subclass) with its layers on the RPC servers;
    the devices are kept on the model, and released when it is closed."""
    with loading_onto(servers) as devices:
        llm = factory(**rpc_kwargs(kwargs))
    attach(llm, devices)
    return llm


def attach(llm: llama_cpp.Llama, devices: RpcDevices) -> None:
    llm.rpc_devices = devices
    llm._stack.callback(devices.release)  # on close (ggml's connection ends with the model's free)
    llm.close = BoundedClose(llm.close, devices.endpoints)  # llama_cpp's __del__ calls it too
    held(llm.close)


# --- a server lost mid-generation ------------------------------------------------------------------

ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_abort_hook = None


def _on_abort(message: bytes) -> None:
    text = (message or b"").decode(errors="replace")
    if "RPC" in text or "Failed to connect to" in text:
        # No lock: the abort may come from inside connect(), which holds it.
        servers = ", ".join(endpoint for endpoint, n in list(_live.items()) if n) or "?"
        os.write(2, (f"plookup: lost an RPC server ({servers}): {text}\nplookup: llama.cpp's RPC backend "
                     f"cannot go on without it; exiting with status {EXIT_RPC_LOST}\n").encode())
        notify(f"lost the RPC server {servers}: llama.cpp's RPC backend cannot go on without it")
        os._exit(EXIT_RPC_LOST)
    # Anything else: what ggml does without a callback (it aborts when this returns).
    os.write(2, (text + "\n").encode())
    ggml().ggml_print_backtrace()


def install_abort_hook() -> None:
    global _abort_hook
    if _abort_hook is None:
        _abort_hook = ABORT_CALLBACK(_on_abort)
        ggml().ggml_set_abort_callback(ctypes.cast(_abort_hook, ctypes.c_void_p))


# --- the server ----------------------------------------------------------------------------------


def start_server(host: str, port: int, threads: int, cache_dir: Optional[str] = None) -> None:
    """llama.cpp's RPC server on this machine's CPU, at host:port; returns only if it cannot
    listen. Runs on a thread of its own, so that Ctrl-C still ends the process."""
    start = _proc("ggml_backend_rpc_start_server", START_SERVER)
    cpu = ggml().ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)
    if not cpu:
        raise RuntimeError("ggml has no CPU device")
    devices = (ctypes.c_void_p * 1)(cpu)
    endpoint = f"{host}:{port}".encode()
    cache = cache_dir.encode() if cache_dir else None
    thread = threading.Thread(target=start, args=(endpoint, cache, threads, 1, devices), daemon=True,
                              name="rpc-server")
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
    sys.stdout.flush()
