"""The log on disk: entries, segments, compaction, recovery, crash and damage."""
