"""Web dashboard and HTTP admin API."""
