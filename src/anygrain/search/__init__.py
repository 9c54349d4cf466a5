"""Search: the Hit every index returns, the Index base and registry, and fusion of runs."""
