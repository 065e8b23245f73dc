"""Activation memory: the paper model (Korthikanti et al. 2022) and the exact model."""
