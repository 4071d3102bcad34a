"""Draft: an index's continuation sized into a draft worth verifying: the values handed over, the
policy, the drafters; the README's map lists its modules."""
