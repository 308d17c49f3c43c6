"""The metadata service ("mq-meta"): vhosts, users, permissions, exchanges, queues, bindings and
policies that every AMQP gateway shares, their mapping onto RocketMQ topics and consumer groups, and a
per-vhost change log that gateways watch."""
