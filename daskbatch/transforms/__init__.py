"""From a decision to new data: steps, :func:`transform` written back to Zarr, and PCA.

- :mod:`~daskbatch.transforms.steps` — select, standardize, clip, quantile, project: each bound to a summary;
- :mod:`~daskbatch.transforms.apply` — :func:`transform`: steps over a whole dataset, out of core, resumable;
- :mod:`~daskbatch.transforms.pca` — principal components from a summary's covariance.
"""

from __future__ import annotations

from daskbatch.transforms.apply import transform

__all__ = ["transform"]
