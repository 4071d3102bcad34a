"""Measure: this machine's verify-cost curve and whether verify batches are exact here, measured once and cached."""
