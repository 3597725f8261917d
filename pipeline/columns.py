"""Names the audit's tables (pipeline.audit) and its report (pipeline.report_data) share.

A leaf module, so the report reads the tables' vocabulary without importing the job that writes
them (and the job imports the report's computation without a cycle).
"""

from __future__ import annotations

# Every row belongs to one group of one coordinator: the key of every per-group window and join.
KEY = ["coordinator_id", "group_id"]
# Leave reasons that are not a member's own choice (storage.history's MEMBER_LEFT `reason`).
ABNORMAL = ["expired", "fenced", "not_rejoined", "sync_expired", "max_size", "rebalance_timeout"]
