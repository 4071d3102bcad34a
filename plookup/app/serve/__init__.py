"""`plookup serve`: an OpenAI-compatible HTTP server for one :class:`plookup.Llama`, with
llama-server's own routes beside the /v1 ones.

command (the command line) → app (the FastAPI routes, one admission path) → controls (llama-server's
request fields, the shape of an answer), llama_routes (llama-server's routes and shapes), errors
(OpenAI-style error bodies), metrics (Prometheus counters, in plookup's and llama-server's names).
"""
