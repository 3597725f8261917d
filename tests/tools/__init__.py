"""The operator tools."""
