"""The layout planner (issue 11)."""
