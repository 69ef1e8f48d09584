"""fleet."""
