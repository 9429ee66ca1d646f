"""figures package."""
