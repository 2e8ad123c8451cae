"""The log: memory-mapped files, the commitlog, its allocation, flush, durability waits and recovery."""
