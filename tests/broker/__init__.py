"""The standalone broker mimic."""
