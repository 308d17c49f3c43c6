"""Request processors: one module per request family, each thin over the broker's services."""
