"""Data parallelism: gradient all-reduce, buckets, overlap, and ZeRO stages."""
