"""CorpusIndex (plookup.index.corpus) against a plain-Python reference, its file refused when foreign,
corrupt or truncated, and building from a tree of files (binary, .gitignored, too large,
latin-1, invalid UTF-8, empty)."""

from __future__ import annotations

import collections
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plookup.index.corpus import CorpusIndex
from plookup.index.corpus_build import build_corpus
from plookup.index.corpus_files import collect, parse_gitignore
from plookup.native import suffix_array as kernels

from support.trees import tree  # noqa: F401 (a fixture)

SEP = kernels.SEP
PROPERTY = settings(max_examples=300, deadline=None)


def reference_lookup(docs: list[list[int]], context: list[int], max_draft: int, max_match: int):
    """(length, count, tokens, counts, agree) straight from the definitions: the longest suffix of
    the context (after its last token outside [0, SEP)) inside one document, then greedily the most
    frequent next token (ties: smallest) among its occurrences; a document end continues with none."""
    context = context[max(0, len(context) - max_match) :] if max_match > 0 else []
    for i in range(len(context) - 1, -1, -1):
        if not 0 <= context[i] < SEP:
            context = context[i + 1 :]
            break
    for length in range(len(context), 0, -1):
        pattern = context[len(context) - length :]
        follow = [(d, s + length) for d, doc in enumerate(docs)
                  for s in range(len(doc) - length + 1) if doc[s : s + length] == pattern]
        if follow:
            break
    else:
        return 0, 0, [], [], []
    count, tokens, counts, agree = len(follow), [], [], []
    while len(tokens) < max_draft:
        votes = collections.Counter(docs[d][p] for d, p in follow if p < len(docs[d]))
        if not votes:
            break
        best = max(votes.values())
        token = min(t for t, v in votes.items() if v == best)
        tokens.append(token), counts.append(best), agree.append(best / len(follow))
        follow = [(d, p + 1) for d, p in follow if p < len(docs[d]) and docs[d][p] == token]
    return length, count, tokens, counts, agree


def answers(match) -> tuple:
    assert match.tokens.dtype == np.int32 and match.counts.dtype == np.int64 and match.agree.dtype == np.float64
    return match.length, match.count, match.tokens.tolist(), match.counts.tolist(), match.agree.tolist()


@st.composite
def corpora(draw):
    """Documents over a small alphabet (so strings repeat, and some occur more than SCAN times)
    and a context mixing corpus stretches, noise and tokens that match nothing."""
    alphabet = draw(st.sampled_from([[0], [0, 1], [0, 1, 2], [5, 7, 49151], list(range(6))]))
    docs = []
    for _ in range(draw(st.integers(0, 4))):  # sizes drawn first: plain st.lists stays short
        size = draw(st.integers(0, 150))
        docs.append(draw(st.lists(st.sampled_from(alphabet), min_size=size, max_size=size)))
    context = []
    for _ in range(draw(st.integers(0, 3))):
        if any(docs) and draw(st.integers(0, 3)):
            doc = draw(st.sampled_from([d for d in docs if d]))
            start = draw(st.integers(0, len(doc) - 1))
            context += doc[start : start + draw(st.integers(1, 40))]
        else:
            context += draw(st.lists(st.sampled_from(alphabet + [-1, SEP, 3, 2**40]), min_size=1, max_size=4))
    return docs, context


def check_against_reference(lookup, docs, context, max_draft, max_match) -> None:
    got = answers(lookup(np.array(context, dtype=np.int64), max_draft, max_match))
    want = reference_lookup(docs, context, max_draft, max_match)
    assert got[:4] == want[:4]
    np.testing.assert_allclose(got[4], want[4], rtol=0, atol=1e-12)


def sampled_ranges_exact(docs, context, max_match) -> bool:
    """Whether the reference's answer is the index's by definition: no step of the continuation
    left more than SCAN occurrences with more than two next tokens (see most_frequent_next)."""
    _, count, tokens, counts, _ = reference_lookup(docs, context, 64, max_match)
    length = reference_lookup(docs, context, 0, max_match)[0]
    pattern = context[len(context) - length :] if length else []
    for k, occurrences in enumerate([count] + counts):
        if occurrences <= kernels.SCAN:
            return True
        prefix = pattern + tokens[:k]
        nexts = {doc[s + len(prefix)] for doc in docs for s in range(len(doc) - len(prefix))
                 if doc[s : s + len(prefix)] == prefix}
        if len(nexts) > 2:
            return False
    return True


@PROPERTY
@given(corpus=corpora(), max_draft=st.integers(0, 20), max_match=st.sampled_from([1, 3, 8, 32]))
def test_lookup_matches_reference(corpus, max_draft, max_match):
    docs, context = corpus
    index = CorpusIndex.from_documents(docs)
    assert len(index) == sum(map(len, docs)) and index.documents == sum(1 for d in docs if d)
    if sampled_ranges_exact(docs, context, max_match):
        check_against_reference(index.lookup, docs, context, max_draft, max_match)
    else:  # sampled: the match and every count are still exact, the token one that follows
        match = index.lookup(np.array(context, dtype=np.int64), max_draft, max_match)
        want = reference_lookup(docs, context, 0, max_match)
        assert (match.length, match.count) == want[:2]


@PROPERTY
@given(docs=st.lists(st.lists(st.integers(0, 3), max_size=60), max_size=6))
def test_suffix_array_sorts_suffixes_up_to_their_document_end(docs):
    index = CorpusIndex.from_documents(docs)
    text = index.text.tolist()
    sa = index._sa.tolist()
    assert sorted(sa) == [i for i, t in enumerate(text) if t != SEP]

    def key(p):
        return text[p : text.index(SEP, p) + 1]

    assert all(key(a) <= key(b) for a, b in zip(sa, sa[1:]))


def test_broken_lookup_is_caught_by_the_reference():
    """Control: a lookup whose match is one token too long (off by one) fails the comparison."""
    docs, context = [[0, 1, 2, 0, 1, 3], [2, 0, 1, 2]], [5, 2, 0, 1]
    index = CorpusIndex.from_documents(docs)
    check_against_reference(index.lookup, docs, context, 4, 8)

    def broken(ctx, max_draft, max_match):
        match = index.lookup(ctx, max_draft, max_match)
        return match._replace(length=match.length + 1)

    with pytest.raises(AssertionError):
        check_against_reference(broken, docs, context, 4, 8)


def test_matches_never_cross_documents():
    index = CorpusIndex.from_documents([[1, 2, 3], [4, 5, 6]])
    match = index.lookup([2, 3, 4], 4)
    assert match.length == 1 and match.tokens.tolist() == [5, 6]  # [3, 4] spans the boundary
    match = index.lookup([1, 2], 4)
    assert match.tokens.tolist() == [3] and match.agree.tolist() == [1.0]  # cut at the file's end


def test_sampled_continuation_finds_a_majority_and_counts_exactly():
    rng = np.random.default_rng(0)
    # 2000 occurrences of [9]: 1200 followed by 4, 800 by 60 other tokens.
    docs = [[9, 4, 1]] * 1200 + [[9, int(t), 1] for t in rng.integers(10, 70, size=800)]
    index = CorpusIndex.from_documents(docs)
    match = index.lookup([9], 2)
    assert (match.length, match.count) == (1, 2000)
    assert match.tokens.tolist() == [4, 1] and match.counts.tolist() == [1200, 1200]
    flat = CorpusIndex.from_documents([[9, int(t)] for t in rng.integers(10, 2000, size=3000)])
    match = flat.lookup([9], 1)
    token = int(match.tokens[0])
    assert match.counts[0] == sum(1 for d in flat.text.tolist()[1::3] if d == token)


def test_empty_corpus_never_matches(tmp_path):
    for index in (CorpusIndex.from_documents([]), CorpusIndex.from_documents([[], []])):
        assert len(index) == 0 and index.documents == 0
        assert index.lookup([1, 2, 3], 8).length == 0
        index.save(tmp_path / "empty.plc")
        loaded = CorpusIndex.load(tmp_path / "empty.plc", vocabulary="")
        assert len(loaded) == 0 and loaded.lookup([1, 2], 8).tokens.size == 0


def test_large_corpus_lookup_finds_planted_copy():
    rng = np.random.default_rng(1)
    text = rng.integers(0, 50_000, size=300_000)
    index = CorpusIndex.from_documents(np.split(text, [100_000, 200_000]))
    context = np.concatenate([[7, 7, 7], text[150_000:150_040]])
    match = index.lookup(context, 16)
    assert match.length == 32 and match.count == 1
    assert match.tokens.tolist() == text[150_040:150_056].tolist()
    assert index.nbytes <= 8 * len(index) + 4 * index.documents + 4 * 50_001


# -- the file


@pytest.fixture
def saved(tmp_path):
    index = CorpusIndex.from_documents([[1, 2, 3, 1, 2, 4], [2, 3]], vocabulary="V1", sources=["a.py", "b.py"])
    path = tmp_path / "corpus.plc"
    index.save(path)
    return index, path


def test_save_load_round_trip(saved):
    index, path = saved
    loaded = CorpusIndex.load(path, vocabulary="V1")
    assert loaded.text.tolist() == index.text.tolist() and loaded.sources == ["a.py", "b.py"]
    assert answers(loaded.lookup([1, 2], 4)) == answers(index.lookup([1, 2], 4))
    assert path.stat().st_size <= 8 * len(index) + 4 * index.documents + 512
    assert path.stat().st_mode & 0o077 == 0  # owner-only: it holds users' text


def test_foreign_vocabulary_refused(saved):
    _, path = saved
    with pytest.raises(ValueError, match=f"{path}: built for another model's vocabulary"):
        CorpusIndex.load(path, vocabulary="V2")


@pytest.mark.parametrize("damage, problem", [
    (lambda b: b[:-4], "truncated"),
    (lambda b: b[:30], "truncated"),
    (lambda b: b[:10], "not a plookup corpus index"),
    (lambda b: b"", "not a plookup corpus index"),
    (lambda b: b"PK\x03\x04" + b[4:], "not a plookup corpus index"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "data checksum"),
    (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], "header checksum"),
    (lambda b: b + b"\0" * 8, "corrupt corpus index"),
])
def test_corrupt_or_truncated_file_refused(saved, damage, problem):
    _, path = saved
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=problem) as raised:
        CorpusIndex.load(path, vocabulary="V1")
    assert str(raised.value).startswith(str(path))


# -- building from files


def test_gitignore_rules_agree_with_git(tmp_path):
    patterns = "*.log\n/build\ndocs/*.tmp\n**/cache/\n!keep.log\n# comment\n\nsub/**/deep.txt\n"
    tree = ["a.log", "keep.log", "build/x.py", "src/build/y.py", "docs/n.tmp", "docs/q/n.tmp",
            "src/cache/z.py", "cache.py", "sub/deep.txt", "sub/a/b/deep.txt", "ok.py"]
    for name in tree:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text(patterns)
    kept = {p.relative_to(tmp_path).as_posix() for p in collect([tmp_path]).files}
    assert kept == {".gitignore", "keep.log", "src/build/y.py", "docs/q/n.tmp", "cache.py", "ok.py"}
    assert len(parse_gitignore(patterns)) == 6
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        checked = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "--no-index", *tree],
                                 capture_output=True, text=True).stdout.split()
        assert set(tree) - set(checked) == kept - {".gitignore"}


class FakeTokenizer:
    """llama_cpp.Llama's tokenize and vocabulary, over UTF-8 bytes (ids 0-255)."""

    def tokenize(self, data: bytes, add_bos: bool, special: bool) -> list[int]:
        assert not add_bos and not special
        return list(data)

    def n_vocab(self) -> int:
        return 256

    class _model:
        @staticmethod
        def token_get_text(token: int) -> str:
            return chr(token)


def test_build_from_tree_skips_what_it_must(tree, tmp_path):
    index, report = build_corpus([tree], FakeTokenizer(), max_file_bytes=4096)
    names = {p.split("/")[-1] for p in index.sources}
    assert names == {".gitignore", "code.py", "latin.txt", "broken.txt"}
    assert {r: sorted(p.name for p in ps) for r, ps in report.skipped.items() if ps} == {
        "binary": ["image.png"], "ignored": ["secret.env"], "too large": ["big.txt"], "empty": ["empty.txt"],
        "duplicate": ["copy.py"],  # the same text as code.py, read first
    }
    assert report.replaced == 2 and report.files == 4 and report.tokens == len(index)
    docs = {p.split("/")[-1]: d for p, d in zip(index.sources, np.split(index.text, np.flatnonzero(index.text == SEP) + 1))}
    assert bytes(docs["latin.txt"][:-1].tolist()).decode() == "caf\ufffd cr\ufffdme\n"
    assert bytes(docs["broken.txt"][:-1].tolist()).decode() == "ok \ufffd\ufffd bytes\n"
    match = index.lookup(list(b"# def add(a,"), 6)
    assert match.length == 10 and bytes(match.tokens.tolist()) == b" b):\n "  # the file starts at "def"
    assert "4 files indexed" in report.summary() and "1 binary" in report.summary()


def test_named_files_and_globs(tree):
    # A file named or globbed is taken whatever .gitignore says; each file once.
    index, report = build_corpus([tree / "secret.env", str(tree / "pkg" / "*.py"), tree / "pkg" / "code.py"], FakeTokenizer())
    assert sorted(p.split("/")[-1] for p in index.sources) == ["code.py", "secret.env"]
    with pytest.raises(FileNotFoundError, match="no file matches"):
        build_corpus([str(tree / "*.nothing")], FakeTokenizer())
    with pytest.raises(FileNotFoundError, match="no such file"):
        build_corpus([tree / "missing.py"], FakeTokenizer())


def test_cli_build(tree, tmp_path, capsys):
    from plookup.app import cli
    from plookup.index import corpus_build

    original = corpus_build._tokenizer
    corpus_build._tokenizer = lambda _: (list, "fake")  # bytes -> their values
    try:
        out = tmp_path / "cli.plc"
        assert cli.main(["corpus", "build", str(tree), "-o", str(out), "-m", __file__]) == 0
    finally:
        corpus_build._tokenizer = original
    summary = capsys.readouterr().out
    assert "5 files indexed" in summary and "1 binary" in summary and f"{out.stat().st_size} bytes" in summary
    assert "1 duplicate" in summary and len(CorpusIndex.load(out, vocabulary="fake")) > 0
    missing = tmp_path / "missing"  # reported before any tokenizer loads (-m names no model here)
    assert cli.main(["corpus", "build", str(missing), "-o", str(out), "-m", str(missing)]) == 1
    assert f"plookup corpus: {missing}: no such file or folder" in capsys.readouterr().err


def test_arrays_out_of_range_refused_even_with_a_valid_checksum(saved, tmp_path):
    index, _ = saved
    suffixes = index._sa.copy()
    suffixes[0] = 10**6  # a position past the text: the kernels would read outside it
    forged = CorpusIndex(index.text, suffixes, "V1")
    path = tmp_path / "forged.plc"
    forged.save(path)
    with pytest.raises(ValueError, match=f"{path}: corrupt corpus index \\(arrays out of range\\)"):
        CorpusIndex.load(path)
    with pytest.raises(ValueError, match="token ids above"):
        CorpusIndex.from_documents([[1, 2**30]])


def test_a_link_back_up_the_tree_is_walked_once(tree):
    (tree / "pkg" / "loop").symlink_to(tree)
    files = collect([tree]).files
    assert len(files) == len({p.resolve() for p in files}) and tree / "pkg" / "code.py" in files
