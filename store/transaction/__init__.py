"""Transactions: half messages, commit and rollback, check-backs, producer groups."""
