"""The rebalance audit: a PySpark pipeline over the coordinators' history logs (issue 7), read from
history directories or from a sidecar fleet's history topic (issue 25).

Only `pipeline.cli`, `pipeline.segments`, `pipeline.topic` and `pipeline.report` import without
PySpark; the rest needs the optional extra (from a clone: `.venv/bin/pip install -e '.[pipeline]'`).
"""
