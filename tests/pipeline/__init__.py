"""The rebalance audit (Spark)."""
