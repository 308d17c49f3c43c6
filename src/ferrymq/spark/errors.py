"""Errors the data source raises: each names the option or queue at fault and what to do."""


class SparkSourceError(ValueError):
    """A bad option or an impossible read (unknown topic, malformed offsets, a queue that is gone)."""


class DataLossError(SparkSourceError):
    """Messages the query must read are no longer on the broker (retention deleted them)."""
