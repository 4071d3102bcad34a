"""A GBNF grammar checked with llama.cpp's own parser before any sampler chain takes it.

``llama_cpp.LlamaGrammar.from_string`` keeps the text unparsed. llama.cpp parses it when the
sampler chain is built and returns NULL for a grammar it cannot parse; llama-cpp-python 0.3.36
adds that NULL to the chain, and the first sample dereferences it: a segfault that takes the whole
process down (``plookup serve`` with it). :func:`check_grammar` parses it first, the same way, and
raises a ValueError carrying llama.cpp's own reason, so the request fails alone (a server answers
400) and the model stays usable.

llama.cpp's parser writes its reason to the process's stderr (``fprintf``), so the check reads
file descriptor 2 for the few microseconds of the parse, one check at a time, and writes
everything it read back to it afterwards: nothing another thread printed meanwhile is lost, only
delayed. Other reasons (no root rule) go to llama.cpp's log callback, at a level llama_cpp's
callback does not print unless verbose: plookup's callback, installed at the first check, keeps
what the checking thread logs during the parse and hands everything else to llama_cpp's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from typing import Iterator, Optional

import llama_cpp
import llama_cpp._logger as llama_logger

_stderr = threading.Lock()
_logged = threading.local()  # .lines: what llama.cpp logs on this thread during a check


@llama_cpp.llama_log_callback
def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    lines = getattr(_logged, "lines", None)
    if lines is not None:
        lines.append(text.decode("utf-8", errors="replace"))
    else:
        llama_logger.llama_log_callback(level, text, user_data)


_installed = False


@contextlib.contextmanager
def stderr_text() -> Iterator[list[str]]:
    """What the process writes to stderr inside the block (written to stderr on exit), then what
    llama.cpp logged on this thread meanwhile, appended to the yielded list on exit."""
    global _installed
    with _stderr, tempfile.TemporaryFile() as capture:
        if not _installed:
            llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))  # _log lives as long as this module
            _installed = True
        _logged.lines = []
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        found: list[str] = []
        try:
            yield found
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            data = capture.read()
            if data:
                os.write(2, data)
            found.append(data.decode("utf-8", errors="replace"))
            found.extend(_logged.lines)
            _logged.lines = None


def grammar_error(vocab, grammar: str, root: str = "root") -> Optional[str]:
    """llama.cpp's reason for refusing `grammar` over this vocabulary (a ``llama_vocab_p``), or
    None when it parses."""
    with stderr_text() as text:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), root.encode("utf-8"))
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
        return None
    return reason("".join(text))


def reason(text: str) -> str:
    """The parser's message in what llama.cpp printed ("parse: error parsing grammar: Undefined
    rule identifier 'foo'" followed by the grammar it echoes), else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error parsing grammar: " in line:
            return line.split("error parsing grammar: ", 1)[1]
    return lines[-1] if lines else "llama.cpp could not parse it"


def check_grammar(vocab, grammar) -> None:
    """Raise a ValueError naming llama.cpp's reason when `grammar` (a ``llama_cpp.LlamaGrammar``,
    or None: nothing to check) does not parse."""
    if grammar is None:
        return
    error = grammar_error(vocab, grammar._grammar, grammar._root)
    if error is not None:
        raise ValueError(f"grammar: llama.cpp cannot parse it: {error}")
