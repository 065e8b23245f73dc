"""The step-time model: per-operation roofline, collectives with overlap, the pipeline step."""
