"""The tasks, one module per family: each processor class here that carries a `name` is a
task by that name (data/processors.py finds them; nothing else lists them)."""
