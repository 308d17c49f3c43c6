"""Pure codecs with no I/O: message records, remoting frames, ids. Imports nothing else of ferrymq."""
