"""Statistics and the store's status report."""
