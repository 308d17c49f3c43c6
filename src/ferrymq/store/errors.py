"""Errors the storage engine raises; each says what went wrong in words an operator can act on."""


class StoreError(Exception):
    """A storage failure that is not the caller's input (I/O, corruption, missing files)."""


class DiskFullError(StoreError):
    """The disk holding the store has no room (ENOSPC, or usage over the warning ratio)."""
