"""cmixlib.models."""
