"""Index: the tokens seen so far (a request's, earlier requests', a corpus's), matched against the
current suffix; the README's map lists its modules."""
