"""Operator tools: `groupcoord groups` and `groupcoord log dump`."""
