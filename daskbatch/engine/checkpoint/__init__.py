"""engine/checkpoint."""
