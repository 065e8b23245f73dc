"""The step-time model a command uses (kept apart so the CLI can name it without importing
the calculators)."""

from __future__ import annotations
