"""Checkpoint / resume of the passes of :func:`daskbatch.describe`."""
