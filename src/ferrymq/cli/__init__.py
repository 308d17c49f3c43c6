"""The ferrymq command line."""
