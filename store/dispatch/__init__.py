"""Dispatch: reading the commitlog behind its writers and building consume queues and the index from it (RocketMQ's ReputMessageService and CommitLogDispatcher), their flush, and rebuilds."""
