"""Sidecar mode: upstream links, header rewriting, lag, and the refresh signal in front of an
upstream cluster. May use serve; serve never imports it."""
