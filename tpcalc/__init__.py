"""tpcalc: what a distributed training layout costs, before a GPU is rented."""

from __future__ import annotations


def __getattr__(name: str) -> object:  # the version string or the plan function
    # The version is set in one place, pyproject.toml's [project] version, and read from the
    # installed metadata on demand (importlib.metadata is not paid for by ordinary commands).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tpcalc")
        except PackageNotFoundError:  # a source tree that was never installed
            return "unknown"
    if name == "plan":  # the layout planner, imported only when asked for (issue 11)
        from tpcalc.reports.plan import plan

        return plan
    raise AttributeError(name)
