"""The RocketMQ 5 controller role: per broker group master, epoch and SyncStateSet, elected through Raft."""
