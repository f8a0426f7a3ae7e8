"""Data: opening Zarr stores, chunk integrity, synthetic data, ingest and the files written."""
