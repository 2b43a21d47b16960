"""Standard-library utilities every layer uses: crash-safe files, logs and checkpoints; statistics."""
