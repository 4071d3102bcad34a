"""Memory scopes (plookup.index.scopes): the memory a request drafts from is its tenant's, named by
its API key and cache_salt together (tests/server/test_memory_scopes.py serves salts alone), and a
scope in use is the last one dropped when there are too many."""

from __future__ import annotations

import itertools

from plookup.index.memory import GlobalMemory
from plookup.index.scopes import MemoryScopes, scope_of

TENANTS = [(None, None), ("key-a", None), ("key-b", None), (None, "key-a"), (None, "salt"),
           ("key-a", "salt"), ("key-b", "salt"), ("key-a", "pepper")]


def test_each_key_and_salt_is_a_scope_of_its_own():
    """Two API keys sending the same salt, a key and a salt spelled alike, one key with two salts:
    each pair is its own scope (else one tenant drafts from another's requests)."""
    scopes = {tenant: scope_of(*tenant) for tenant in TENANTS}
    assert scopes[(None, None)] == ""
    for a, b in itertools.combinations(TENANTS, 2):
        assert scopes[a] != scopes[b], (a, b)
    assert scope_of("key-a", "salt") == scopes[("key-a", "salt")]  # the same tenant: the same scope
    assert "key-a" not in scopes[("key-a", None)]  # named by a digest, never by the key


def test_a_scopes_memory_is_its_own_and_stays_while_in_use():
    shared = GlobalMemory(64)
    scopes = MemoryScopes(shared, max_scopes=2)
    assert scopes.get("") is shared
    a, b = scopes.get("a"), scopes.get("b")
    assert a is not b and a is not shared and a.max_tokens == shared.max_tokens
    a.add([1, 2, 3])
    assert scopes.get("a") is a  # "a" used again: now the most recent, "b" the least
    scopes.get("c")  # one too many: the least recently used goes
    assert scopes.get("a") is a and len(list(scopes.items())) == 3  # the shared one, "a" and "c"
    assert scopes.get("b") is not b  # dropped: a new, empty memory


def test_an_empty_scopes_memory_is_kept_too():
    """Two requests of a new scope at once draft from one memory: the second `get` of a scope whose
    memory is still empty must not replace it (an empty memory is falsy), or the first request's
    text would be written into a memory already dropped."""
    scopes = MemoryScopes(GlobalMemory(64))
    first = scopes.get("new")
    assert len(first) == 0 and scopes.get("new") is first
