"""theory package."""
