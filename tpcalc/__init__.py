"""tpcalc: what a distributed training layout costs, before a GPU is rented."""

__version__ = "0.1.0"
