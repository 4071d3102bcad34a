"""`plookup bench`: plookup beside plain llama.cpp decoding and other drafters, on real workloads.

command (the command line) → workloads (what is decoded), plain (plain greedy decoding, the
yardstick for identity), systems and llama_server (the decoders compared, each in a process of its
own), measure (the arithmetic over runs), replay (drafters without the model), drafter_timing,
report (tables, progress, chart).
"""
