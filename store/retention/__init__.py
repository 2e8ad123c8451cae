"""Retention: deleting expired commitlog, consume queue and index files, and watching the disk."""
