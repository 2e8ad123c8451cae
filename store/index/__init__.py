"""The index files: keys and message ids to commitlog offsets, their rebuild and key queries."""
