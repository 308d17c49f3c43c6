"""The AMQP 0-9-1 gateway that maps exchanges, queues and bindings onto topics and groups."""
