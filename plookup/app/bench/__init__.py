"""`plookup bench`: plookup beside plain llama.cpp decoding and other drafters, on real workloads;
the README's map lists its modules."""
