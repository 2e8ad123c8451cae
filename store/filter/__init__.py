"""Message filters: tags and SQL92 property filters (parsed, checked, compiled for the gather kernel)."""
