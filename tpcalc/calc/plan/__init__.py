"""The layout planner (issue 11): enumerate every layout of a model on a number of GPUs, keep the
ones that divide and fit, and rank them by the step-time model with a provable branch-and-bound.

``types`` holds the request and the typed results, ``space`` the candidate grid and its
divisibility rules, ``bounds`` the cheap provable lower bounds, ``search`` the search itself.
"""
