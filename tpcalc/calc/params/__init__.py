"""Parameter counts, their breakdown, and the model-state bytes per parameter."""
