"""Context parallelism: ring attention traffic, causal load balance, Ulysses."""
