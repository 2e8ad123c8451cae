"""The message: its fields and properties, its stored bytes (the 17-field layout), compressed bodies, copies."""
