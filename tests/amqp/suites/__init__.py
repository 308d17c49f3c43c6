"""Published test suites of real AMQP clients (kombu, py-amqp, pika, amqplib), run unchanged against the
gateway and judged against what they do on RabbitMQ 3.10: see docs/amqp.md, "Client test suites"."""
