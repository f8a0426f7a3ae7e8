"""Data: input readers, the Zarr open path and its chunk integrity, synthetic data, ingest and the files written."""
