"""Data quality: per-batch, per-host counters of items and fields, kept by the workers, and the comparison
with the batches before, made by the master at close (docs/quality.md)."""
