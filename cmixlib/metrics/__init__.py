"""cmixlib.metrics."""
