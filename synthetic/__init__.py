"""synthetic package."""
