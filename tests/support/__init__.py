"""What the tests share: references they compare plookup against, prompts, the time budgets.

Tests import from here (``from support.plain import greedy_with_gaps``); tests/ is on sys.path
through tests/conftest.py.
"""
