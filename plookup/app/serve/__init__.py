"""`plookup serve`: an OpenAI-compatible HTTP server for one :class:`plookup.Llama`.

command (the command line) → app (the FastAPI routes) → errors (OpenAI-style error bodies),
metrics (Prometheus counters).
"""
