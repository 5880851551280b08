"""study layer."""
