"""cmixlib.methods."""
