"""llama-server's runner (:mod:`.llama_server`): llama.cpp's own model-free drafters, as systems of
`plookup bench`'s comparisons, started and driven over HTTP. Run from a checkout (``python -m
benchmarks.servers``): not part of the installed package."""
