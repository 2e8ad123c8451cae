"""The disk under the store: free space and its reservations, atomic writes of small files, the store's lock file."""
