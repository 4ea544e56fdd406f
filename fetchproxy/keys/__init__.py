"""keys."""
