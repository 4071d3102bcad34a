"""API: plookup.Llama, llama_cpp's entry points on the engine: its load and the figures measured
for it, each call and its stats, how tokens are chosen, Predicted Outputs, a model over RPC servers;
the README's map lists its modules."""
