"""`plookup serve`: an OpenAI-compatible HTTP server for one :class:`plookup.Llama`, with
llama-server's own routes and the coding agents' wires beside the /v1 ones.

command (the command line) → app (the FastAPI routes, one admission path) → controls (llama-server's
request fields, the shape of an answer), chat (a chat's tools: prompt, grammar, the answer read by
toolcalls, each model family's call format), llama_routes (llama-server's routes and shapes),
agent_routes (/v1/responses and /v1/messages, converted to and from a chat by responses_api and
messages_api), errors (error bodies), metrics (Prometheus counters, in plookup's and llama-server's
names).
"""
