"""What a run measured and where it lies: per-request records, the results store's layout, atomic writes, one
point's outcome and the summary tables."""
