"""From a decision to new data: steps, :func:`transform` written back to Zarr, and PCA."""

from __future__ import annotations

from daskbatch.transforms.apply import transform

__all__ = ["transform"]
