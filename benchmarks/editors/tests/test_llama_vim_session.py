"""`python -m benchmarks.editors --editor session`: the port of llama.vim's FIM logic (its context
window, the ring of chunks and its timer, the cache, the speculative request, one request in
flight), the typing user, the live runs and the figures, on a virtual clock with fakes (no model,
no server, no download: the packages are made here). test_llama_vim_conformance.py holds the port
to requests recorded from the real plugin. Where a rule could be checked by a test that passes
anyway, a broken version of it is run through the same check and must fail it."""

from __future__ import annotations

import pytest

from benchmarks.editors import llama_vim as editor
from benchmarks.editors import llama_vim_session as ts
from benchmarks.editors.llama_vim_session import (
    Buffer,
    FakeSlot,
    Loop,
    Ring,
    Vim,
    chunk_sim,
    fim_ctx_local,
    make_plan,
    percentile,
    render,
    run_figures,
    run_live,
    run_sessions,
    same_positions,
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
    assert extra[-1] == {"text": ring.chunks[-1].text, "time": [0, 32000], "filename": "g2"}  # (32 ms as reltime())


def test_chunk_similarity_is_llama_vims():
    assert chunk_sim(["a b c"], ["a b c"]) == 1.0
    assert chunk_sim([], []) == 1.0
    assert chunk_sim(["a b"], ["c d"]) == 0.0
    assert chunk_sim(["a, b;"], ["a a x"]) == pytest.approx(2 * 2 / 5)  # words of c1 counted each time
    assert chunk_sim(["foo_bar(x)"], ["foo_bar"]) == pytest.approx(2 / 3)  # \W splits, "_" is a word character




# -- llama.vim in a Vim, on the virtual clock


def typing_buffer() -> Buffer:
    lines = numbered(300)
    lines[149] = ""  # the user opened a line here
    return Buffer("f.py", lines, y=150, x=0, modified=True)


DELAY_MS = 300


def vim_typing(contents, delay=DELAY_MS):
    """A Vim in insert mode on typing_buffer(), its server answering `contents` in turn (FIM
    requests; a warm-up gets {}) after `delay` ms each, one at a time."""
    loop = Loop()
    contents = list(contents)

    def answer(body):
        if body["n_predict"] == 0:
            return {}
        return {"content": contents.pop(0) if contents else "\n"}

    vim = Vim(loop, FakeSlot(loop, answer, lambda body: delay), {"f.py": "\n".join(numbered(300)) + "\n"},
              ts.vim_rand(0))
    vim.buffer = vim.buffers["f.py"] = typing_buffer()
    vim.mode = "i"
    return vim, loop


def test_no_chunk_from_a_modified_buffer_where_llama_vim_checks():
    vim, _ = vim_typing([])
    vim.buffer = Buffer("f.py", numbered(100), y=50, modified=True)
    assert not vim.pick_chunk(vim.buffer.around_cursor(), True, True)  # BufEnter/BufLeave/BufWritePost
    assert vim.pick_chunk(vim.buffer.getlines(10, 14), False, True)  # a yank
    assert vim.ring.queued[0].filename == "f.py"


def test_the_ring_timer_sends_a_warm_up_a_second_in_normal_mode_and_after_3_s_still_in_insert_mode():
    vim, loop = vim_typing([])
    vim.enable()
    vim.mode = "n"
    vim.pick_chunk(vim.buffer.getlines(1, 10), False, True)
    vim.pick_chunk(vim.buffer.getlines(60, 70), False, True)
    vim.pick_chunk(vim.buffer.getlines(200, 210), False, True)
    loop.run_until(999)
    assert vim.sent == []
    loop.run_until(1000)
    body = vim.sent[0].body
    assert [c["text"] for c in body["input_extra"]] == ["\n".join(numbered(10)) + "\n"]
    assert body["n_predict"] == 0 and body["samplers"] == [] and body["t_max_prompt_ms"] == 1
    assert body["t_max_predict_ms"] == 1 and body["input_prefix"] == body["input_suffix"] == body["prompt"] == ""
    assert body["response_fields"] == [""] and body["cache_prompt"] and body["id_slot"] == 0
    vim.mode, vim.t_last_move = "i", 1500  # typing: no warm-up until the cursor rests 3 s
    loop.run_until(4000)
    assert len(vim.sent) == 1
    loop.run_until(5000)
    assert len(vim.sent) == 2 and len(vim.sent[1].body["input_extra"]) == 2


def test_the_speculative_request_is_the_context_after_the_suggestion():
    vim, loop = vim_typing(["def f(a, b):\n", "\n    return a + b\n", "\n"])
    buf = vim.buffer
    vim.fim(0, 150, True, [], True)
    first = vim.sent[0]
    assert first.kind == "first" and first.body["t_max_predict_ms"] == 250 and first.body["prompt"] == ""
    assert first.body["n_indent"] == 0 and first.body["n_predict"] == 128 and "temperature" not in first.body
    assert first.body["top_k"] == 40 and first.body["top_p"] == 0.90 and first.body["t_max_prompt_ms"] == 500
    assert first.body["samplers"] == ["top_k", "top_p", "infill"] and first.body["cache_prompt"]
    loop.run_until(DELAY_MS)  # the answer: shown, and at once the speculative request
    speculative = vim.sent[1]
    assert speculative.kind == "speculative" and speculative.prev == ("def f(a, b):",)
    assert speculative.t_sent == DELAY_MS
    body = speculative.body
    assert body["prompt"] == "def f(a, b):" and body["t_max_predict_ms"] == 1000
    assert body["input_prefix"] == first.body["input_prefix"] and body["input_suffix"] == first.body["input_suffix"]
    assert vim.hint_shown and vim.fim_data["content"] == ["def f(a, b):"]
    loop.run_until(2 * DELAY_MS)  # shown and acceptable: its answer is only cached
    assert len(vim.sent) == 2
    assert vim.tab()  # accepted: the cursor after it; the cache has that place: the next speculative one
    assert buf.lines[149] == "def f(a, b):" and buf.x == len("def f(a, b):")
    again = vim.sent[2]
    assert again.kind == "speculative" and again.prev == ("", "    return a + b")
    assert again.body["prompt"] == "    return a + b"
    assert again.body["input_prefix"].endswith("line 149 = 149 * w\ndef f(a, b):\n")
    assert again.body["input_prefix"].startswith("line 1 = ")  # (150 lines: the window reaches the top)
    assert len(vim.sent) == 3  # the cursor's own context is cached: llama#fim sent nothing for it


def test_a_key_while_a_request_runs_waits_and_only_the_newest_is_sent():
    vim, loop = vim_typing(["wrong()\n", "x\n"])
    vim.fim(-1, -1, True, [], True, origin=0)
    for t, ch in ((100, "d"), (150, "e"), (250, "f")):  # each call replaces the last one's 100 ms timer
        loop.run_until(t)
        vim.type(ch)
    assert len(vim.sent) == 1
    loop.run_until(DELAY_MS)  # the answer: stale ("wrong" is not what was typed): cached, not shown
    assert not vim.hint_shown and len(vim.sent) == 1
    loop.run_until(349)
    assert len(vim.sent) == 1
    loop.run_until(350)  # the newest key's timer, 100 ms after it
    assert len(vim.sent) == 2 and vim.sent[1].body["prompt"] == "def" and vim.sent[1].origin == 250
    assert vim.sent[1].t_sent == 350


def test_control_a_port_that_sends_every_key_fails_the_wait():
    class Eager(Vim):
        def fim(self, *args, **kwargs):
            self.job_fim = None
            super().fim(*args, **kwargs)

    vim, loop = vim_typing(["wrong()\n"])
    vim.__class__ = Eager
    vim.fim(-1, -1, True, [], True)
    vim.type("d")
    assert len(vim.sent) == 2


def test_typed_characters_that_match_a_cached_suggestion_show_its_rest():
    vim, loop = vim_typing(["def compute(a, b):\n"])
    buf = vim.buffer
    vim.fim(0, 150, True, [], True)
    loop.run_until(DELAY_MS)
    buf.lines[149], buf.x = "def com", 7
    assert vim.lookup(7, 150) == {"content": "pute(a, b):\n"}
    buf.lines[149] = "def cal"
    assert vim.lookup(7, 150) is None  # typed otherwise: nothing to show


def test_a_later_answer_does_not_replace_a_shown_suggestion():
    """s:fim_on_response shows an answer only where nothing acceptable is shown."""
    vim, loop = vim_typing(["def compute(a, b):\n", "\n    return 1\n", "pile(x):\n"])
    buf = vim.buffer
    vim.fim(0, 150, True, [], True)
    loop.run_until(3 * DELAY_MS)
    buf.lines[149], buf.x = "def com", 7
    vim.on_move()  # the cached rest shown; its speculative context is cached too
    assert vim.fim_data["content"] == ["pute(a, b):"] and len(vim.sent) == 2
    vim.fim(7, 150, True, [], True)
    request = vim.sent[-1]
    assert request.kind == "first" and request.body["prompt"] == "def com"
    loop.run_until(loop.now + DELAY_MS)
    assert vim.fim_data["content"] == ["pute(a, b):"]


def test_a_fim_request_evicts_ring_chunks_like_the_text_at_the_cursor():
    vim, _ = vim_typing([])
    buf = vim.buffer
    vim.ring.pick(buf.getlines(130, 170), "f.py", 0, True, vim.rand)  # the text around the cursor
    vim.ring.pick([f"other{i} words{i} here{i}" for i in range(8)], "g.py", 1, True, vim.rand)
    vim.ring.update(), vim.ring.update()
    vim.fim(0, 150, True, [], True)
    assert [c["filename"] for c in vim.sent[0].body["input_extra"]] == ["g.py"] and vim.ring.n_evict == 1


def test_nothing_is_shown_outside_insert_mode():
    vim, loop = vim_typing(["def f():\n"])
    vim.fim(0, 150, True, [], True)
    vim.mode = "n"
    loop.run_until(DELAY_MS)
    assert not vim.hint_shown and len(vim.sent) == 1



def test_render_blanks_a_suggestion_that_repeats_the_next_line():
    buf = typing_buffer()
    assert render(buf, 0, 150, "line 151 = 151 * w\n")["content"] == [""]
    shown = render(buf, 0, 150, "x = 1\n\n")
    assert shown["content"] == ["x = 1"] and shown["can_accept"]
    assert not render(buf, 0, 150, "   \n")["can_accept"]




# -- the plan


def test_the_plan_types_functions_of_two_packages_deep_in_their_files():
    plan = make_plan(PACKAGES, 0)
    assert len({t.package for t in plan}) == 2 and len(plan) == 2 * ts.TASKS_PER_PACKAGE
    for task in plan:
        lines = PACKAGES[task.package][task.path].splitlines()
        assert ts.FUNCTION_LINES[0] <= task.end - task.first <= ts.FUNCTION_LINES[1]
        assert lines[task.first].startswith("def ") and task.first >= ts.MIN_LINES_BEFORE
        assert task.visits and all(v.path != task.path and v.path in PACKAGES[task.package] for v in task.visits)




# -- the user, live on the virtual clock


def oracle(packages, right=True):
    """A fake server, from a body: the file's own text after the prefix and prompt (the typed text,
    or a shown suggestion after it) to the end of the next line (`right`), else a wrong line."""
    files = [text for files in packages.values() for text in files.values()]

    def answer(body):
        if body["n_predict"] == 0:
            return {"timings/prompt_n": 7}
        shown = (body["input_prefix"] + body["prompt"])[-2000:]
        rest = next((text[text.find(shown) + len(shown):] for text in files if shown in text), "")
        if not right or not rest:
            return {"content": "    wrong = True\n", "timings/prompt_n": 11, "timings/predicted_n": 5}
        end = rest.find("\n", rest.find("\n") + 1)
        return {"content": rest[: end + 1] if end >= 0 else rest, "timings/prompt_n": 11, "timings/predicted_n": 5}
    return answer


def live(answer, delay=600):
    """run_live on a virtual clock against a fake one-slot server."""
    def run(server, packages, plan, seed, sampling, extra=None):
        loop = Loop()
        return run_live(server, packages, plan, seed, sampling, extra, loop=loop,
                        jobs=FakeSlot(loop, lambda body: answer({**body, **(extra or {})}), lambda body: delay))
    return run


def written(run_record, packages, plan):
    return run_record["user"]["functions_completed"] == len(plan)


def test_the_user_accepts_right_suggestions_and_writes_the_function_back():
    plan = make_plan(PACKAGES, 3)[:2]
    right = live(oracle(PACKAGES))(None, PACKAGES, plan, 3, "sampled")
    assert right["user"]["functions_completed"] == 2 and right["user"]["accepted"] >= 2
    wrong = live(oracle(PACKAGES, right=False))(None, PACKAGES, plan, 3, "sampled")
    assert wrong["user"]["functions_completed"] == 2 and wrong["user"]["accepted"] == 0
    assert wrong["user"]["typed_chars"] > right["user"]["typed_chars"]
    kinds = {r["kind"] for r in right["requests"]}
    assert kinds == {"first", "speculative", "warm-up"}
    for r in right["requests"]:  # one FIM request in flight at a time
        assert r["answered_ms"] is not None
    fim = sorted((r["sent_ms"], r["answered_ms"]) for r in right["requests"] if r["kind"] != "warm-up")
    assert all(a[1] <= b[0] for a, b in zip(fim, fim[1:]))


def test_the_user_keeps_typing_while_a_request_runs():
    plan = make_plan(PACKAGES, 3)[:1]
    slow = live(oracle(PACKAGES, right=False), delay=3 * ts.PATIENCE_MS)(None, PACKAGES, plan, 3, "sampled")
    keys = [p["key_ms"] for p in slow["positions"]]
    first = [r for r in slow["requests"] if r["kind"] == "first"]
    assert len(keys) > 3 * len(first)  # many keys a request: the user did not wait
    assert all(p["by"] is None for p in slow["positions"])  # no answer was ever for where the cursor was


def test_at_a_line_start_the_user_waits_for_a_suggestion_reads_it_and_types_on():
    plan = make_plan(PACKAGES, 3)[:1]
    run = live(oracle(PACKAGES, right=False), delay=600)(None, PACKAGES, plan, 3, "sampled")
    positions = run["positions"]
    read = [(p, q) for p, q in zip(positions, positions[1:]) if p["by"] in ("first", "speculative")]
    assert read and all(q["key_ms"] == pytest.approx(p["shown_ms"] + ts.REACTION_MS) for p, q in read)
    impatient = live(oracle(PACKAGES, right=False), delay=ts.PATIENCE_MS + 100)(None, PACKAGES, plan, 3, "sampled")
    assert run_figures(impatient)["shown_from_answer"] == 0  # control: past the patience, never shown


def test_a_seed_gives_one_session():
    plan = make_plan(PACKAGES, 5)[:2]
    a, b = (live(oracle(PACKAGES))(None, PACKAGES, plan, 5, "sampled") for _ in range(2))
    assert a == b
    c = live(oracle(PACKAGES))(None, PACKAGES, plan, 6, "sampled")
    assert [r["sent_ms"] for r in c["requests"]] != [r["sent_ms"] for r in a["requests"]]


class FakeServer:
    def __init__(self, kind):
        self.kind, self.closed = kind, False
        self.command = ["fake", *kind.split()]

    def close(self):
        self.closed = True


def test_every_system_runs_alternating_each_on_a_fresh_server():
    started = []

    def start(kind):
        started.append(FakeServer(kind))
        return started[-1]

    seen = []

    def answer(body):
        seen.append(body)
        return oracle(PACKAGES)(body)

    systems = ["llama-server", "plookup plain"]
    part = run_sessions(systems, start, lambda _: None, PACKAGES, 4, tasks=1, repeats=2,
                        samplings=["sampled", "greedy"], n_ctx=8192, live=live(answer))
    assert [s.kind for s in started] == [ts.SESSION_SYSTEMS[n][0] for n in
                                         systems + systems + systems[::-1] + systems[::-1]]
    assert all(s.closed for s in started)
    assert [(r["system"], r["sampling"], r["repeat"]) for r in part["runs"]] == [
        ("llama-server", "sampled", 0), ("plookup plain", "sampled", 0), ("llama-server", "greedy", 0),
        ("plookup plain", "greedy", 0), ("plookup plain", "sampled", 1), ("llama-server", "sampled", 1),
        ("plookup plain", "greedy", 1), ("llama-server", "greedy", 1)]
    fim = [b for b in seen if b["n_predict"]]
    assert {b.get("seed") for b in fim} == {4}
    assert any(b.get("speculative") == {"n_max": 0} for b in fim) and any("speculative" not in b for b in fim)
    assert any(b.get("temperature") == 0.0 for b in fim) and any("temperature" not in b for b in fim)
    assert part["settings"]["n_ctx"] == 8192 and len(part["plan"]) == 1
    summary = session_summary(part["runs"])
    assert summary[("llama-server", "sampled")]["runs"] == 2
    assert "llama-server" in session_table(summary)


def test_a_sweep_point_runs_on_llama_vims_flags():
    started = []

    def start(kind):
        started.append(FakeServer(kind))
        return started[-1]

    part = run_sessions(["llama-server ngram-map-k 32"], start, lambda _: None, PACKAGES, 4, tasks=1, repeats=1,
                        samplings=["sampled"], n_ctx=8192, live=live(oracle(PACKAGES)))
    (server,) = started
    assert server.kind == ("llama-server -ub 1024 -b 1024 --cache-reuse 256 "
                           + editor.system("llama-server ngram-map-k 32")[0].removeprefix("llama-server "))
    assert [r["system"] for r in part["runs"]] == ["llama-server ngram-map-k 32"]
    assert ts.session_system("plookup") == ts.SESSION_SYSTEMS["plookup"]
    with pytest.raises(ValueError, match="no system"):
        ts.session_system("llama-server eagle 16")


# -- figures


def test_percentile_interpolates():
    assert percentile([3, 1, 2], 0.5) == 2
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile(list(range(11)), 0.9) == pytest.approx(9.0)
    assert percentile([1, 10], 0.9) == pytest.approx(9.1)
    assert percentile([], 0.5) is None and percentile([4], 0.9) == 4


def request(kind, sent, answered, origin=None, prompt_n=10):
    return {"kind": kind, "sent_ms": sent, "answered_ms": answered, "origin_ms": origin, "prompt_n": prompt_n,
            "predicted_n": 3, "error": None}


def test_the_figures_on_a_hand_made_run():
    run = {
        "user": {"accepted": 1},
        "positions": [
            {"key_ms": 0, "shown_ms": 900, "by": "first", "waits": True},
            {"key_ms": 1000, "shown_ms": 1000, "by": "cache"},  # shown at once: counted apart
            {"key_ms": 1200, "shown_ms": None, "by": None, "waits": True},  # none while the user waited
            {"key_ms": 1400, "shown_ms": 3400, "by": "speculative"},  # an answer that foresaw the keys
            {"key_ms": 5000, "shown_ms": 5500, "by": "first"},
        ],
        "requests": [request("warm-up", 0, 400), request("first", 100, 900, origin=0),
                     request("speculative", 900, 1500, origin=900), request("first", 1600, 3400, origin=1200),
                     request("first", 5000, 5500, origin=5000)],
    }
    f = run_figures(run)
    assert f["shown_from_answer"] == 3 and f["shown_from_cache"] == 1 and f["never_shown"] == 1
    assert f["shown_median_s"] == pytest.approx(0.9) and f["shown_p90_s"] == pytest.approx(1.78)
    assert f["first"] == 3 and f["speculative"] == 1 and f["warm_ups"] == 1
    assert f["fim_behind_warm_up"] == 1  # the first request at 100 ms, the warm-up in the server until 400
    assert f["first_wait_median_s"] == pytest.approx(0.1)
    # the line starts: one shown after 0.9 s, one not while the user waited (their patience, 5 s)
    assert (f["waits"], f["waits_shown"]) == (2, 1)
    assert f["wait_median_s"] == pytest.approx((0.9 + 5.0) / 2) and f["wait_p90_s"] == pytest.approx(0.9 + 0.9 * 4.1)
    assert f["waits_within"] == [1, 1, 1, 1, 1]  # shown after 0.9 s: within every second of the curve
    late = dict(run, positions=[*run["positions"], {"key_ms": 6000, "shown_ms": 8500, "by": "first", "waits": True}])
    assert run_figures(late)["waits_within"] == [1, 1, 2, 2, 2]  # one more after 2.5 s: from 3 s on
    summary = session_summary([dict(run, system="a", sampling="sampled"),
                               dict(run, system="a", sampling="sampled", figures=dict(f, shown_median_s=2.0))])
    row = summary[("a", "sampled")]
    assert row["median_of_runs"] == pytest.approx(1.45) and row["median_spread"] == (0.9, 2.0)
    assert (row["within"], row["waited"]) == ([2, 2, 2, 2, 2], 4)  # the two runs' line starts pooled
    assert "2/2/2/2/2 of 4" in session_table(summary)


def test_the_same_positions_are_compared_where_both_showed_an_answer():
    def at(col, shown_after_ms=None, by="first", line=1):
        key = 1000 * col
        return {"file": "a.py", "line": line, "col": col, "key_ms": key, "by": by if shown_after_ms is not None else None,
                "shown_ms": None if shown_after_ms is None else key + shown_after_ms}

    def run(system, repeat, positions):
        return {"system": system, "sampling": "sampled", "repeat": repeat, "positions": positions}

    runs = [
        run("p", 0, [at(0, 1000), at(1, 2000), at(2, 500), at(3, 0, by="cache"), at(0, 3000)]),
        run("l", 0, [at(0, 1500), at(1, 1000), at(2), at(3, 0, by="cache"), at(0, 4000), at(5, 100)]),
        run("l", 1, [at(0, 9000)]),  # another repeat, another user: paired with none of p's runs
    ]
    (row,) = same_positions(runs)
    # shown by an answer on both: col 0 (the first visit and the second, apart), col 1; not col 2
    # (p only), col 3 (the cache's on both), col 5 (l only)
    assert row["systems"] == ("p", "l") and row["runs"] == 1 and row["positions"] == 3
    assert row["medians"] == (pytest.approx(2.0), pytest.approx(1.5))  # p 1, 2, 3 s; l 1.5, 1, 4 s
    assert row["p90s"] == (pytest.approx(2.8), pytest.approx(3.5))
    assert (row["sooner"], row["later"]) == (2, 1)
    # col 0's second visit is a position of its own: where l never came back, two are compared
    assert same_positions([runs[0], dict(runs[1], positions=runs[1]["positions"][:4])])[0]["positions"] == 2


def test_the_report_of_the_recorded_runs_gives_the_published_same_positions(capsys):
    """BENCHMARKS.md's typing session (nine alternating runs after the cache change): the figures
    it and the README quote for the same positions are what the report computes from the JSON."""
    from pathlib import Path

    from benchmarks.editors.__main__ import main

    docs = Path(__file__).resolve().parents[3] / "docs"
    runs = [str(docs / f"editor-session-live-kept-cells{part}-ngram-simple-32-qwen-0.5b-q8_0.json.gz")
            for part in ("", "-three-more", "-last-three")]
    assert main(["--editor-report", *runs]) == 0
    assert ("sampled, the same positions shown by an answer on both (9 pairs of runs of one repeat, pooled): 34; "
            "median / p90 plookup 3.61 / 4.65 s, llama-server ngram-simple 32 3.94 / 4.79 s; "
            "plookup sooner at 18, later at 16") in capsys.readouterr().out


def test_session_runs_merge_where_the_settings_are_the_same():
    part = {"settings": {"seed": 1}, "runs": [{"system": "a"}], "commands": {"a": "x"}}
    same = {"settings": {"seed": 1}, "runs": [{"system": "b"}], "commands": {"b": "y"}}
    other = {"settings": {"seed": 2}, "runs": [{"system": "c"}], "commands": {"c": "z"}}
    merged = editor.merge([{"session": part}, {"session": same}, {"session": other}])
    assert [r["system"] for r in merged["session"]["runs"]] == ["a", "b"]


def test_session_is_an_editor_workload():
    assert editor.parse_list("session", editor.WORKLOADS, "--editor") == ["session"]
    assert set(ts.SESSION_DEFAULT_SYSTEMS) <= set(ts.SESSION_SYSTEMS) <= set(editor.SYSTEMS)
    for name, (kind, _) in ts.SESSION_SYSTEMS.items():
        assert "-ub 1024 -b 1024 --cache-reuse 256" in kind
