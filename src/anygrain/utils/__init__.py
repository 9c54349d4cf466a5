"""Small shared utilities: atomic writes, hashing, progress."""
