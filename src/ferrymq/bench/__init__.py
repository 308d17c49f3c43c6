"""Benchmarks behind `ferrymq bench`: each measures one layer and returns plain dicts of figures."""
