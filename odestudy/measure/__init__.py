"""measure layer."""
