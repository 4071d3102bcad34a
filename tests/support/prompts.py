"""Prompts whose greedy answers are known, shared by the model and server tests."""

# Plain greedy decoding of both prompts has no near-tie (top-2 logit gap < 0.3) over the tokens
# generated here on SmolLM2 (checked with plookup.plain.greedy_with_gaps), so the text with and
# without a prediction must be identical.
COUNT_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
COUNT_TEXT = " 13, 14, 15, 16, 17,"  # its first 20 tokens
COUNT_PREDICTION = {"type": "content", "content": " 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23"}  # 43 tokens
FOX = [{"role": "user", "content": "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the river bank."}]
FOX_TEXT = "The quick brown fox jumps over the lazy dog."
FOX_PREDICTION = {
    "type": "content",
    "content": [{"type": "text", "text": "The quick brown fox "}, {"type": "text", "text": "jumps over the lazy cat."}],
}
