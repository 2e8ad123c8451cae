"""Consume queues, dispatch from the commitlog into them, and reads (pulls) through them."""
