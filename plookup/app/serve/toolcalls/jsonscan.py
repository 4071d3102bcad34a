"""Where a JSON value ends in a model's output that may still be growing.

Streaming parsers must tell three cases apart at every step: the value is complete (and where it
ends), the text so far is a prefix of some valid value (wait for more), or it can never become
valid (it is not a call after all). ``json.raw_decode`` only answers the first, so this scanner
walks the value with a stack of open containers.
"""

from __future__ import annotations

import json
import re

MORE = -1  # the text so far is a prefix of a valid value
BAD = -2  # no continuation makes it valid

_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
_STRING_PREFIX = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*(?:\\(?:u[0-9a-fA-F]{0,3})?)?\Z')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_WS = re.compile(r"[ \t\n\r]*")
_LITERALS = ("true", "false", "null")


def _scalar(text: str, i: int) -> int:
    """End of the string, number or literal at ``i``; MORE or BAD otherwise."""
    c = text[i]
    if c == '"':
        m = _STRING.match(text, i)
        if m:
            return m.end()
        return MORE if _STRING_PREFIX.match(text, i) else BAD
    if c == "-" or c.isdigit():
        # A number running into the end of the text may still grow ("1" -> "12", "2." -> "2.5").
        longest = _NUMBER_PREFIX.match(text, i).end()
        if longest == len(text):
            return MORE
        m = _NUMBER.match(text, i)
        return m.end() if m and m.end() == longest else BAD
    for lit in _LITERALS:
        if text.startswith(lit, i):
            return i + len(lit)
        if lit.startswith(text[i:]):
            return MORE
    return BAD


def scan(text: str, pos: int) -> int:
    """End index of the JSON value starting at ``pos`` (no leading whitespace), or MORE / BAD."""
    stack: list[str] = []
    expect = "value"  # value | value_or_close | key | key_or_close | colon | comma_or_close
    i, n = pos, len(text)
    while True:
        if stack:
            i = _WS.match(text, i).end()
        if i >= n:
            return MORE
        c = text[i]
        closing = c in "]}" and (
            (expect == "comma_or_close" and "{[".index(stack[-1]) == "}]".index(c))
            or (expect == "value_or_close" and c == "]")
            or (expect == "key_or_close" and c == "}")
        )
        if closing:
            stack.pop()
            i += 1
            if not stack:
                return i
            expect = "comma_or_close"
        elif expect in ("value", "value_or_close") and c in "{[":
            stack.append(c)
            expect = "key_or_close" if c == "{" else "value_or_close"
            i += 1
        elif expect in ("value", "value_or_close"):
            end = _scalar(text, i)
            if end < 0:
                return end
            if not stack:
                return end
            i, expect = end, "comma_or_close"
        elif expect in ("key", "key_or_close"):
            if c != '"':
                return BAD
            m = _STRING.match(text, i)
            if not m:
                return MORE if _STRING_PREFIX.match(text, i) else BAD
            i, expect = m.end(), "colon"
        elif expect == "colon":
            if c != ":":
                return BAD
            i, expect = i + 1, "value"
        elif c == ",":  # comma_or_close
            i, expect = i + 1, ("key" if stack[-1] == "{" else "value")
        else:
            return BAD


def load_object(text: str) -> dict | None:
    """``text`` as a JSON object, or None when it is not exactly one object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
