"""Measure: this machine's verify-cost curve, whether verify batches are exact here, its decode
speeds and host time, measured once and cached; the README's map lists its modules."""
