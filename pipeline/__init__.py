"""The rebalance audit: a PySpark pipeline over the coordinators' history logs (issue 7).

Only `pipeline.cli` and `pipeline.segments` / `pipeline.report` import without PySpark; the rest
needs the optional extra (`pip install 'groupcoord[pipeline]'`).
"""
