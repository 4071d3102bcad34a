"""plookup serve renders a chat once: it runs the arguments llama_cpp's template handler gave
``create_completion`` and reshapes the answer as that handler does after it
(:func:`plookup.app.serve.app.chat_from_completion`). That holds for the handler's code as read;
a llama_cpp whose handler or conversion changed fails here, naming what to read again, instead
of skipping new work after ``create_completion`` without a word."""

from __future__ import annotations

import hashlib
import inspect

import pytest
from llama_cpp import llama_chat_format

# sha256 of each function's source in llama-cpp-python 0.3.36 (the version the Makefile builds).
READ = {
    "chat_formatter_to_chat_completion_handler": "7ec834a139df80cedcccd723448745c4b520bb7617825d182e00e650aedf2fbf",
    "_convert_completion_to_chat": "552cbe5a12073879e213b9f2f5541b680272d65a3398c10fca7ef7813c1f2271",
}


def source_hash(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


@pytest.mark.parametrize("name", READ)
def test_the_template_handler_is_the_one_chat_from_completion_follows(name):
    assert source_hash(getattr(llama_chat_format, name)) == READ[name], (
        f"llama_cpp.llama_chat_format.{name} changed: check that plookup.app.serve.app.chat_from_completion "
        f"still does what the handler does after create_completion, then record the new hash")


def test_a_changed_source_reads_as_changed():
    """The control: one character more in the handler's source is another hash."""
    source = inspect.getsource(llama_chat_format.chat_formatter_to_chat_completion_handler)
    assert hashlib.sha256((source + " ").encode()).hexdigest() != READ["chat_formatter_to_chat_completion_handler"]
