"""`python -m benchmarks.editors --editor session`: the port of llama.vim's FIM logic (its context
window, the ring of chunks and its warm-ups, the cache and the speculative request), the typing
user, the replay and the figures, with fakes (no model, no server, no download: the packages are made here).
Where a rule could be checked by a test that passes anyway, a broken version of it is run through
the same check and must fail it."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.editors import llama_vim as editor
from benchmarks.editors import llama_vim_session as ts
from benchmarks.editors.llama_vim_session import (
    Buffer,
    Ring,
    Session,
    Vim,
    chunk_sim,
    drive,
    event_offsets,
    fim_ctx_local,
    make_plan,
    percentile,
    prompt_differences,
    render,
    run_sessions,
    session_summary,
    session_table,
)


def module(name: str, functions: int) -> str:
    """A module of `functions` six-line functions, each line told apart by its numbers."""
    parts = [f'"""Module {name}."""\n\nimport os\n\n\n']
    for f in range(functions):
        parts.append(f"def {name}_{f}(a, b):\n    x = a + {f}\n    y = b * {f + 1} - {3 * f}\n    if x > y:\n"
                     f"        return x - y + {name}_{f}_size\n    return os.sep.join([str(x), '{name}{f}'])\n\n\n")
    return "".join(parts)


PACKAGES = {
    "alpha": {f"alpha/m{i}.py": module(f"alpha{i}", 40) for i in range(4)} | {"alpha/tiny.py": "x = 1\n"},
    "beta": {f"beta/n{i}.py": module(f"beta{i}", 40) for i in range(3)},
    "gamma": {f"gamma/g{i}.py": module(f"gamma{i}", 40) for i in range(3)},
}


def numbered(n: int) -> list:
    return [f"line {i} = {i} * w" for i in range(1, n + 1)]


# -- the context window (s:fim_ctx_local)


def window_problems(ctx_local) -> list:
    """What is wrong with `ctx_local`'s window against llama.vim's rules: 256 lines before the
    cursor's line, 64 after, the line's part before the cursor as the prompt, the rest first in
    the suffix; a line of whitespace counted empty at indent 0; near the top, what there is."""
    buf = Buffer("f.py", numbered(400))
    buf.lines[299] = "    total = compute(a, b)"
    problems = []
    ctx = ctx_local(buf, 9, 300, [], -1)
    if ctx["prefix"] != "\n".join(buf.lines[43:299]) + "\n":
        problems.append("prefix: lines 44-299")
    if ctx["middle"] != "    total":
        problems.append("prompt: the line up to the cursor")
    if ctx["suffix"] != " = compute(a, b)\n" + "\n".join(buf.lines[300:364]) + "\n":
        problems.append("suffix: the line's rest, lines 301-364")
    if ctx["indent"] != 4:
        problems.append("indent of the line")
    buf.lines[299] = "    "
    ctx = ctx_local(buf, 4, 300, [], -1)
    if (ctx["middle"], ctx["indent"]) != ("", 0) or not ctx["suffix"].startswith("\nline 301"):
        problems.append("a line of whitespace is empty")
    ctx = ctx_local(buf, 0, 10, [], -1)
    if ctx["prefix"] != "\n".join(buf.lines[:9]) + "\n":
        problems.append("near the top: the lines there are")
    ctx = ctx_local(buf, 0, 390, [], -1)
    if ctx["suffix"] != buf.lines[389] + "\n" + "\n".join(buf.lines[390:]) + "\n":
        problems.append("near the end: the lines there are")
    return problems


def test_the_window_is_llama_vims():
    assert window_problems(fim_ctx_local) == []


def test_a_window_of_other_sizes_is_caught():
    """Controls: a window one line off before or after, or a prompt of the whole line, fails."""
    def wider(buf, pos_x, pos_y, prev, indent_last):
        ctx = fim_ctx_local(buf, pos_x, pos_y, prev, indent_last)
        extra = buf.getlines(pos_y - 257, pos_y - 257)
        return dict(ctx, prefix="\n".join(extra) + "\n" + ctx["prefix"] if extra else ctx["prefix"])

    def whole_line(buf, pos_x, pos_y, prev, indent_last):
        ctx = fim_ctx_local(buf, pos_x, pos_y, prev, indent_last)
        return dict(ctx, middle=buf.line(pos_y))

    def longer_suffix(buf, pos_x, pos_y, prev, indent_last):
        ctx = fim_ctx_local(buf, pos_x, pos_y, prev, indent_last)
        return dict(ctx, suffix=ctx["suffix"] + buf.line(pos_y + 65) + "\n")

    for broken in (wider, whole_line, longer_suffix):
        assert window_problems(broken), broken.__name__


def test_a_shown_suggestion_makes_the_context_as_if_accepted():
    buf = Buffer("f.py", numbered(400))
    buf.lines[299] = "    if x"
    one = fim_ctx_local(buf, 8, 300, [" > y:"], 4)
    assert one["middle"] == "    if x > y:" and one["prefix"] == "\n".join(buf.lines[43:299]) + "\n"
    assert one["suffix"] == "\n" + "\n".join(buf.lines[300:364]) + "\n" and one["indent"] == 4
    three = fim_ctx_local(buf, 8, 300, [" > y:", "        return x", "    z = 1"], 4)
    # the window keeps 256 lines: it starts two lines later, and ends with the suggestion's lines
    assert three["prefix"] == "\n".join(buf.lines[45:299] + ["    if x > y:", "        return x"]) + "\n"
    assert three["middle"] == "    z = 1" and three["prefix"].count("\n") == 256


# -- the ring (s:pick_chunk, s:ring_update)


def counter():
    calls = []

    def rand(i0, i1):
        calls.append((i0, i1))
        return i1  # the last place
    return rand, calls


def test_a_chunk_is_at_most_33_lines_of_the_text():
    ring, (rand, calls) = Ring(), counter()
    assert not ring.pick(["a", "b"], "f", 0, True, rand)  # under 3 lines
    assert ring.pick(numbered(10), "f", 0, True, rand) and not calls  # a short text: all of it
    assert ring.queued[-1].data == numbered(10) and ring.queued[-1].text == "\n".join(numbered(10)) + "\n"
    text = [f"word{i} other{i} more{i}" for i in range(65)]
    assert ring.pick(text, "g", 1, True, rand)
    assert calls == [(0, 33)] and ring.queued[-1].data == text[33:]  # rand(0, 65 - 32): lines l0..l0+32
    assert not ring.pick(text, "g", 2, True, rand)  # held already
    first = Ring()
    assert first.pick(text, "h", 3, True, lambda i0, i1: i0) and first.queued[-1].data == text[:33]  # 33 lines


def test_similar_chunks_are_evicted_or_the_new_one_dropped():
    words = [f"alpha{i} beta{i} gamma{i}" for i in range(20)]
    ring, rand = Ring(), counter()[0]
    ring.pick(words, "a", 0, True, rand)
    near = words[:19] + ["alpha19 beta19 delta"]  # 0.98 alike
    assert chunk_sim(words, near) > 0.9
    assert not ring.pick(near, "b", 1, False, rand)  # llama#fim's picks: dropped
    assert [c.filename for c in ring.queued] == ["a"]
    assert ring.pick(near, "b", 1, True, rand)  # yank, enter, leave, write: the old one evicted
    assert [c.filename for c in ring.queued] == ["b"] and ring.n_evict == 1


def test_the_queue_and_the_ring_keep_16():
    ring, rand = Ring(), counter()[0]
    for i in range(20):
        assert ring.pick([f"unique{i}_{k} token{i}x{k}" for k in range(5)], f"f{i}", i, True, rand)
    assert len(ring.queued) == 16 and ring.queued[0].filename == "f4"  # the oldest dropped
    for _ in range(16):
        assert ring.update()
    assert not ring.update() and len(ring.chunks) == 16
    for i in range(3):
        ring.pick([f"later{i}_{k} more{i}y{k}" for k in range(5)], f"g{i}", 30 + i, True, rand)
        ring.update()
    assert len(ring.chunks) == 16 and ring.chunks[0].filename == "f7" and ring.chunks[-1].filename == "g2"
    extra = ring.extra()
    assert extra[-1] == {"text": ring.chunks[-1].text, "time": [32, 0], "filename": "g2"}


def test_chunk_similarity_is_llama_vims():
    assert chunk_sim(["a b c"], ["a b c"]) == 1.0
    assert chunk_sim([], []) == 1.0
    assert chunk_sim(["a b"], ["c d"]) == 0.0
    assert chunk_sim(["a, b;"], ["a a x"]) == pytest.approx(2 * 2 / 5)  # words of c1 counted each time
    assert chunk_sim(["foo_bar(x)"], ["foo_bar"]) == pytest.approx(2 / 3)  # \W splits, "_" is a word character


def test_no_chunk_from_a_modified_buffer_where_llama_vim_checks():
    vim = Vim(random.Random(0), 10)
    vim.buffer = Buffer("f.py", numbered(100), y=50, modified=True)
    assert not vim.pick_chunk(vim.buffer.around_cursor(), True, True)  # BufEnter/BufLeave/BufWritePost
    assert vim.pick_chunk(vim.buffer.getlines(10, 14), False, True)  # a yank
    assert vim.ring.queued[0].filename == "f.py"


def test_a_tick_sends_one_warm_up_with_the_new_ring_when_a_chunk_is_queued():
    vim = Vim(random.Random(0), 10)
    vim.buffer = Buffer("f.py", numbered(100), y=50)
    assert list(vim.ring_update()) == []  # nothing queued: no request
    vim.pick_chunk(vim.buffer.getlines(1, 10), False, True)
    vim.pick_chunk(vim.buffer.getlines(60, 70), False, True)
    warm = list(vim.ring_update())
    assert len(warm) == 1 and warm[0].kind == "warm-up"
    body = warm[0].body
    assert [c["text"] for c in body["input_extra"]] == ["\n".join(numbered(10)) + "\n"]
    assert body["n_predict"] == 0 and body["samplers"] == [] and body["t_max_prompt_ms"] == 1
    assert body["t_max_predict_ms"] == 1 and body["input_prefix"] == body["input_suffix"] == body["prompt"] == ""
    assert body["response_fields"][0] == "" and body["cache_prompt"] and body["id_slot"] == 0
    assert len(vim.ring.queued) == 1  # one chunk a tick


class Ticks(Session):
    """A session that logs each tick: the chunks queued before it and the requests it sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ticks = []

    def tick(self):
        queued, sent = len(self.vim.ring.queued), self.vim.sent
        yield from super().tick()
        self.ticks.append((queued, self.vim.sent - sent))


def oracle(packages, right=True):
    """A fake server, from a body: the file's own text after the prefix and prompt (the typed text,
    or a shown suggestion after it) to the end of the line (`right`), else a wrong line."""
    files = [text for files in packages.values() for text in files.values()]

    def answer(body):
        if body["n_predict"] == 0:
            return {"timings/prompt_n": 7}
        shown = (body["input_prefix"] + body["prompt"])[-2000:]
        rest = next((text[text.find(shown) + len(shown):] for text in files if shown in text), "")
        if not right or not rest:
            return {"content": "    wrong = True\n", "timings/prompt_n": 11, "timings/predicted_n": 5}
        end = rest.find("\n", 1)
        return {"content": rest[: end + 1] if end >= 0 else rest, "timings/prompt_n": 11, "timings/predicted_n": 5}
    return lambda request: answer(request.body if isinstance(request, ts.Request) else request)


def test_warm_ups_fire_between_events_while_chunks_are_queued():
    plan = make_plan(PACKAGES, 1)
    session = Ticks(plan, PACKAGES, 1, limit=60)
    exchanges = drive(session, oracle(PACKAGES))
    assert len(exchanges) == 60 and session.ticks
    for queued, sent in session.ticks[:-1]:  # (the last may have hit the limit)
        assert sent == (1 if queued else 0)
    warm = [r for r, _ in exchanges if r.kind == "warm-up"]
    assert warm and len(warm) == sum(sent for _, sent in session.ticks)
    assert len(session.ticks) >= session.events  # a tick after every typing event (and between moves)
    # each warm-up brings a chunk no earlier request carried, last in the ring
    seen = set()
    for request, _ in exchanges:
        texts = [c["text"] for c in request.body["input_extra"]]
        if request.kind == "warm-up":
            assert texts[-1] not in seen
        seen.update(texts)


def test_the_fim_requests_that_follow_a_warm_up_carry_its_chunks():
    plan = make_plan(PACKAGES, 2)
    exchanges = drive(Session(plan, PACKAGES, 2, limit=50), oracle(PACKAGES))
    pairs = [(a, b) for (a, _), (b, _) in zip(exchanges, exchanges[1:]) if a.kind == "warm-up" and b.kind != "warm-up"]
    assert pairs
    for warm, fim in pairs:
        kept = [c["text"] for c in fim.body["input_extra"]]
        # llama#fim may evict chunks like the text at the cursor, never adds one
        assert set(kept) <= {c["text"] for c in warm.body["input_extra"]}


# -- the cache, the suggestion and the speculative request


def typing_buffer() -> Buffer:
    lines = numbered(300)
    lines[149] = ""  # the user opened a line here
    return Buffer("f.py", lines, y=150, x=0, modified=True)


def test_the_speculative_request_is_the_context_after_the_suggestion():
    vim = Vim(random.Random(0), 10)
    vim.buffer = buf = typing_buffer()
    gen = vim.fim(0, 150, True, [], True)
    first = next(gen)
    assert first.kind == "first" and first.body["t_max_predict_ms"] == 250 and first.body["prompt"] == ""
    assert first.body["n_indent"] == 0 and first.body["n_predict"] == 128
    assert first.body["top_k"] == 40 and first.body["top_p"] == 0.90 and first.body["t_max_prompt_ms"] == 500
    assert first.body["samplers"][:3] == ["top_k", "top_p", "infill"] and first.body["cache_prompt"]
    speculative = gen.send({"content": "def f(a, b):\n"})
    body = speculative.body
    assert speculative.kind == "speculative" and speculative.prev == ("def f(a, b):",)
    assert body["prompt"] == "def f(a, b):" and body["t_max_predict_ms"] == 1000
    assert body["input_prefix"] == first.body["input_prefix"] and body["input_suffix"] == first.body["input_suffix"]
    assert vim.hint_shown and vim.fim_data["content"] == ["def f(a, b):"]
    with pytest.raises(StopIteration):  # shown and acceptable: its answer is only cached
        gen.send({"content": "\n    return a + b\n"})
    # accepted (Tab): the cursor after it; the cache has that place: no first request, the next speculative one
    buf.lines[149], buf.x = "def f(a, b):", len("def f(a, b):")
    vim.hide()
    gen = vim.on_move()
    again = next(gen)
    assert again.kind == "speculative" and again.prev == ("", "    return a + b")
    assert again.body["prompt"] == "    return a + b"
    assert again.body["input_prefix"].endswith("line 149 = 149 * w\ndef f(a, b):\n")
    assert again.body["input_prefix"].startswith("line 1 = ")  # (150 lines: the window reaches the top)
    with pytest.raises(StopIteration):
        gen.send({"content": "\n"})
    assert list(vim.fim(buf.x, buf.y, True, [], True)) == []  # cached: llama#fim sends nothing


def test_typed_characters_that_match_a_cached_suggestion_show_its_rest():
    vim = Vim(random.Random(0), 10)
    vim.buffer = buf = typing_buffer()
    gen = vim.fim(0, 150, True, [], True)
    next(gen)
    gen.send({"content": "def compute(a, b):\n"})  # shown: the speculative request follows
    buf.lines[149], buf.x = "def com", 7
    assert vim.lookup(7, 150) == {"content": "pute(a, b):\n"}
    buf.lines[149] = "def cal"
    assert vim.lookup(7, 150) is None  # typed otherwise: nothing to show


def test_a_later_answer_does_not_replace_a_shown_suggestion():
    """s:fim_on_response shows an answer only where nothing acceptable is shown."""
    vim = Vim(random.Random(0), 10)
    vim.buffer = buf = typing_buffer()
    gen = vim.fim(0, 150, True, [], True)
    next(gen)
    gen.send({"content": "def compute(a, b):\n"})
    with pytest.raises(StopIteration):
        gen.send({"content": "\n    return 1\n"})
    buf.lines[149], buf.x = "def com", 7
    vim.hide()
    assert list(vim.on_move()) == []  # the cached rest shown; its speculative context is cached too
    assert vim.fim_data["content"] == ["pute(a, b):"]
    gen = vim.fim(7, 150, True, [], True)
    request = next(gen)
    assert request.kind == "first" and request.body["prompt"] == "def com"
    with pytest.raises(StopIteration):
        gen.send({"content": "pile(x):\n"})
    assert vim.fim_data["content"] == ["pute(a, b):"]


def test_a_fim_request_evicts_ring_chunks_like_the_text_at_the_cursor():
    vim = Vim(random.Random(0), 10)
    vim.buffer = buf = typing_buffer()
    vim.ring.pick(buf.getlines(130, 170), "f.py", 0, True, vim.rand)  # the text around the cursor
    vim.ring.pick([f"other{i} words{i} here{i}" for i in range(8)], "g.py", 1, True, vim.rand)
    vim.ring.update(), vim.ring.update()
    request = next(vim.fim(0, 150, True, [], True))
    assert [c["filename"] for c in request.body["input_extra"]] == ["g.py"] and vim.ring.n_evict == 1


def test_render_blanks_a_suggestion_that_repeats_the_next_line():
    buf = typing_buffer()
    assert render(buf, 0, 150, "line 151 = 151 * w\n")["content"] == [""]
    shown = render(buf, 0, 150, "x = 1\n\n")
    assert shown["content"] == ["x = 1"] and shown["can_accept"]
    assert not render(buf, 0, 150, "   \n")["can_accept"]


# -- the user


def test_event_offsets_are_line_starts_and_every_n_characters():
    text = "def f(a):\n    return a + 1234567890123456789012345\n\n    pass"
    offsets = event_offsets(text, 20)
    assert offsets == [0, 10, 10 + 4 + 20, 51, 52]  # the 40-character line: one event inside it
    assert all(text[o - 1] == "\n" for o in (10, 51, 52))


def test_the_user_accepts_right_suggestions_and_writes_the_function_back():
    plan = make_plan(PACKAGES, 3)
    right = Session(plan, PACKAGES, 3, limit=400)
    exchanges = drive(right, oracle(PACKAGES))
    assert right.completed == len(plan) and right.accepted > 0
    kinds = {r.kind for r, _ in exchanges}
    assert kinds == {"first", "speculative", "warm-up"}
    wrong = Session(plan, PACKAGES, 3, limit=400)
    drive(wrong, oracle(PACKAGES, right=False))
    assert wrong.accepted == 0 and wrong.completed == len(plan) and wrong.events > right.events
    assert wrong.typed > right.typed


def test_the_plan_types_functions_of_two_packages_deep_in_their_files():
    plan = make_plan(PACKAGES, 0)
    assert len({t.package for t in plan}) == 2 and len(plan) == 2 * ts.TASKS_PER_PACKAGE
    for task in plan:
        lines = PACKAGES[task.package][task.path].splitlines()
        assert ts.FUNCTION_LINES[0] <= task.end - task.first <= ts.FUNCTION_LINES[1]
        assert lines[task.first].startswith("def ") and task.first >= ts.MIN_LINES_BEFORE
        assert task.visits and all(v.path != task.path and v.path in PACKAGES[task.package] for v in task.visits)


def test_a_seed_gives_one_session():
    def sequence(seed, limit=70):
        plan = make_plan(PACKAGES, seed)
        exchanges = drive(Session(plan, PACKAGES, seed, limit), oracle(PACKAGES))
        return [(r.kind, ts.sha256(repr(sorted(r.body.items())))) for r, _ in exchanges]

    first = sequence(5)
    assert len(first) == 70
    assert sequence(5) == first
    assert sequence(6) != first
    assert sequence(5, 30) == first[:30]  # the limit cuts the same session


def test_the_limit_stops_the_session_at_that_many_requests():
    plan = make_plan(PACKAGES, 0)
    for limit in (1, 9, 40):
        assert len(drive(Session(plan, PACKAGES, 0, limit), oracle(PACKAGES))) == limit


# -- replaying on servers


class FakeServer:
    def __init__(self, kind, answer):
        self.kind, self.answer, self.bodies, self.closed = kind, answer, [], False
        self.command = ["fake", *kind.split()]

    def post(self, route, body):
        assert route == "/infill" and not self.closed
        self.bodies.append(body)
        return self.answer(body), 0.5

    def close(self):
        self.closed = True


def test_every_system_gets_the_drivers_requests_in_order_on_a_fresh_server():
    started = []

    def start(kind):
        started.append(FakeServer(kind, oracle(PACKAGES)))
        return started[-1]

    systems = ["llama-server", "plookup plain", "plookup"]
    part = run_sessions(systems, start, lambda _: None, PACKAGES, 4, limit=40, n_ctx=8192)
    assert [s.kind for s in started] == [ts.SESSION_SYSTEMS[n][0] for n in systems]
    assert all(s.closed for s in started)
    driver, plain, drafting = started
    assert len(driver.bodies) == 40
    assert plain.bodies == [dict(b, speculative={"n_max": 0}) for b in driver.bodies]  # its field on each
    assert drafting.bodies == driver.bodies
    assert part["driver"] == "llama-server" and list(part["runs"]) == systems
    assert [e["kind"] for e in part["script"]] == [r["kind"] for r in part["runs"]["plookup"]]
    assert [r["index"] for r in part["runs"]["plookup"]] == list(range(40))
    assert part["settings"]["n_ctx"] == 8192 and part["settings"]["requests"] == 40
    assert [e["body_sha256"] for e in part["script"]] == [ts.sha256(json.dumps(b, sort_keys=True)) for b in driver.bodies]
    for entry, body in zip(part["script"], driver.bodies):  # the chunks table holds each chunk once
        assert [part["chunks"][i]["text"] for i in entry["extra"]] == [c["text"] for c in body["input_extra"]]
    assert len({c["text"] for c in part["chunks"]}) == len(part["chunks"])
    assert part["user"]["events"] > 0 and part["plan"][0]["path"] in PACKAGES[part["plan"][0]["package"]]


# -- figures


def record(index, kind, seconds, prompt_n, predicted_n=0, content="", budget_ms=None):
    return {"index": index, "kind": kind, "seconds": seconds, "prompt_n": prompt_n, "prompt_ms": seconds * 500,
            "predicted_n": predicted_n, "predicted_ms": 100.0, "content": content, "draft_n": None,
            "draft_n_accepted": None, "stop_type": "limit", "tokens_cached": None,
            "budget_ms": budget_ms if budget_ms is not None else {"first": 250, "speculative": 1000}.get(kind)}


def test_percentile_interpolates():
    assert percentile([3, 1, 2], 0.5) == 2
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile(list(range(11)), 0.9) == pytest.approx(9.0)
    assert percentile([1, 10], 0.9) == pytest.approx(9.1)
    assert percentile([], 0.5) is None and percentile([4], 0.9) == 4


def test_the_summary_on_hand_made_records():
    a = [record(0, "warm-up", 2.0, 300), record(1, "first", 0.7, 1000, 8, "x"), record(2, "speculative", 1.4, 250, 20, "y"),
         record(3, "first", 0.8, 40, 6, "z"), record(4, "speculative", 3.0, 260, 30, "w"), record(5, "warm-up", 1.0, 200)]
    b = [dict(r, seconds=r["seconds"] * 2) for r in a]
    b[1] = dict(b[1], content="other", prompt_n=2000)
    summary = session_summary({"a": a, "b": b}, "a")
    s = summary["a"]
    assert s["requests"] == {"first": 2, "speculative": 2, "warm-up": 2}
    assert s["first_median_s"] == pytest.approx(0.75) and s["first_p90_s"] == pytest.approx(0.79)
    assert s["speculative_median_s"] == pytest.approx(2.2) and s["speculative_p90_s"] == pytest.approx(2.84)
    assert s["prompt_n_fim"] == 1000 + 250 + 40 + 260 and s["prompt_n_warm_up"] == 500
    # in budget: first within 0.75 s, speculative within 1.5 s (t_max_prompt_ms + t_max_predict_ms)
    assert s["in_budget"] == 2 and s["tokens_in_budget"] == 8 + 20 and s["tokens"] == 64
    t = summary["b"]
    assert t["in_budget"] == 0 and t["tokens_in_budget"] == 0 and t["same_text"] == 3 and t["same_as"] == "a"
    assert "same_text" not in s
    table = session_table(summary, {"a": 10.0, "b": 20.0})
    assert "0.75 / 0.79 (2)" in table and "1550 / 500 (2)" in table and "(driver)" in table and "3/4" in table
    assert prompt_differences({"a": a, "b": b}, "a") == {"b": [(1, "first", 1000, 2000)]}


def test_the_budget_rule_is_the_one_llama_vim_asks_for():
    """Control: a first request's budget is 750 ms, not a speculative one's 1500 ms."""
    assert ts.in_budget(record(0, "first", 0.75, 1))
    assert not ts.in_budget(record(0, "first", 0.76, 1))
    assert ts.in_budget(record(0, "speculative", 1.5, 1)) and not ts.in_budget(record(0, "speculative", 1.51, 1))


def test_session_runs_merge_only_over_the_same_requests():
    part = {"script": [{"body_sha256": "1"}, {"body_sha256": "2"}], "runs": {"a": []}, "walls": {"a": 1.0}, "driver": "a"}
    same = dict(part, runs={"b": []}, walls={"b": 2.0})
    other = dict(part, script=[{"body_sha256": "3"}], runs={"c": []}, walls={"c": 3.0})
    merged = editor.merge([{"session": part}, {"session": same}, {"session": other}])
    assert set(merged["session"]["runs"]) == {"a", "b"} and merged["session"]["walls"] == {"a": 1.0, "b": 2.0}


def test_session_is_an_editor_workload():
    assert editor.parse_list("session", editor.WORKLOADS, "--editor") == ["session"]
    assert set(ts.SESSION_DEFAULT_SYSTEMS) <= set(ts.SESSION_SYSTEMS) <= set(editor.SYSTEMS)
    for name, (kind, _) in ts.SESSION_SYSTEMS.items():
        assert "-ub 1024 -b 1024 --cache-reuse 256" in kind
