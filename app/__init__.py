"""tidemq's HTTP front end: a FastAPI application over the store (see app.server)."""
