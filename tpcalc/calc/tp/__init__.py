"""Tensor parallelism: divisibility, per-card shards, communication, FLOPs."""
