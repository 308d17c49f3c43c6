"""The NameServer role: the route registry brokers register with and clients ask for routes."""
