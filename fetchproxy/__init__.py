"""fetchproxy."""
