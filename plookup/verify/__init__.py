"""Verify: a step's rows, the acceptance rule, and how a verified row's token is read (argmax,
backend, sampler chain); the README's map lists its modules."""
