"""Combined layouts: group placement, and their memory, communication and compute time."""
