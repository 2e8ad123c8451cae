"""Runnable Spark jobs over tidemq topics."""
