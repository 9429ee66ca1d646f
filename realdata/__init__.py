"""realdata package."""
