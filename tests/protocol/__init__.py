"""Wire codecs, framing, fast paths (Hypothesis round trips)."""
