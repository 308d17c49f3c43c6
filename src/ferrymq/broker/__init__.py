"""The Broker role: thin request processors over ferrymq.store and ferrymq.net."""
