"""pull."""
