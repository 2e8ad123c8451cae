"""Topics, consumer offsets and topic deletions."""
