"""The RocketMQ 5 gRPC proxy (apache.rocketmq.v2.MessagingService) in front of brokers."""
