"""The search: enumerate, check, fit, then rank by step time with a provable branch-and-bound."""

from __future__ import annotations

from tpcalc.calc.plan.types import PlanRequest, PlanResult


def plan(request: PlanRequest) -> PlanResult:
    """The best layouts for ``request`` (module docstring)."""
    raise NotImplementedError("the plan search is being built (issue 11)")
