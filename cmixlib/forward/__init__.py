"""cmixlib.forward."""
