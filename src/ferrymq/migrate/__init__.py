"""Moving applications and their messages from another broker to ferrymq."""
