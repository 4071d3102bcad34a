"""The agent replay's reading of answers (benchmarks/agents/replay.py): the calls in each route's
answer, and how much of their arguments copies the request, against a brute-force reference."""

from __future__ import annotations

import json
import random

from benchmarks.agents import replay
from benchmarks.agents.replay import MIN_COPY, calls_in, copied


def test_calls_are_read_from_every_route_s_answer():
    chat = json.dumps(["text", [["edit", '{"filePath": "a.py"}'], ["bash", '{"command": "ls"}']]])
    responses = json.dumps([["reasoning", None, None, []], ["function_call", "exec_command", '{"cmd": "ls"}', []],
                            ["message", None, None, ["done"]]])
    messages = json.dumps([["text", "I will look.", None, None], ["tool_use", None, "Read", {"file_path": "a.py"}]])
    assert calls_in(chat) == [("edit", '{"filePath": "a.py"}'), ("bash", '{"command": "ls"}')]
    assert calls_in(responses) == [("exec_command", '{"cmd": "ls"}')]
    assert calls_in(messages) == [("Read", {"file_path": "a.py"})]
    assert calls_in(json.dumps([None, []])) == calls_in(json.dumps([["message", None, None, ["hi"]]])) == calls_in("") == []


def test_an_edit_copying_the_file_it_read_is_counted_and_new_text_is_not():
    old = "    def total_value(self):\n        return sum(item.total_value() for item in self.items.values())"
    body = {"messages": [{"role": "tool", "content": "class Inventory:\n" + old + "\n"}]}
    new = "    def stock_value(self):"
    answer = json.dumps([None, [["edit", json.dumps({"filePath": "inventory.py", "oldString": old, "newString": new})]]])
    covered, total = copied(calls_in(answer), body)
    assert total == len("inventory.py") + len(old) + len(new)
    # the old text whole, and of the new one its four leading spaces and "def " are too short to count
    assert covered == len(old) + len("_value(self):")


def reference_copied(texts: list[str], source: str) -> int:
    """Left to right, the longest piece of at least MIN_COPY characters found in `source`, by trying every length."""
    covered = 0
    for text in texts:
        i = 0
        while i < len(text):
            found = next((n for n in range(len(text) - i, MIN_COPY - 1, -1) if text[i : i + n] in source), 0)
            covered, i = covered + found, i + max(found, 1)
    return covered


def test_copied_characters_equal_a_brute_force_count_on_random_texts():
    rng = random.Random(7)
    for _ in range(300):
        source = "".join(rng.choice("ab c\n") for _ in range(rng.randint(0, 80)))
        texts = [source[rng.randint(0, len(source)) :][: rng.randint(0, 40)] + "".join(rng.choice("abc ") for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 3))]
        answer = json.dumps([None, [["edit", json.dumps({f"k{i}": t for i, t in enumerate(texts)})]]])
        assert copied(calls_in(answer), {"input": source}) == [reference_copied(texts, source), sum(map(len, texts))]


def test_a_short_common_piece_is_not_a_copy(monkeypatch):
    body = {"input": "x = compute(total)"}
    answer = json.dumps([None, [["bash", json.dumps({"command": "compute(total)"})]]])  # 14 characters, copied
    assert copied(calls_in(answer), body) == [14, 14]
    monkeypatch.setattr(replay, "MIN_COPY", 15)  # the control: one character past the piece, no copy
    assert copied(calls_in(answer), body) == [0, 14]
