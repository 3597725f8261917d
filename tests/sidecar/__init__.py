"""Sidecar mode in front of tansu."""
