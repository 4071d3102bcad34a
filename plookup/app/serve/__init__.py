"""`plookup serve`: an OpenAI-compatible HTTP server for one :class:`plookup.Llama`, with
llama-server's own routes and the coding agents' wires beside the /v1 ones;
the README's map lists its modules."""
