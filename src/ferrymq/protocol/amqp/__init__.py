"""AMQP 0-9-1 as RabbitMQ speaks it, without I/O: frames, field tables, methods (pamqp for the cold
path, hand-written codecs for publish/deliver/ack) and the server side of a connection as a state
machine that takes bytes and time in and gives bytes and events out."""
