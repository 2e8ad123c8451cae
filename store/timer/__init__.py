"""Timer messages: RocketMQ 5's timer log and wheel, enqueue, dequeue, checkpoint and progress."""
