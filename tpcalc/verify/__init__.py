"""The verification bench: tensor-parallel splits simulated on t numpy "cards" (seed 000, 003).

numpy is imported only inside this package, and only when a verify module is imported; tpcalc
itself and every other command never load it.
"""
