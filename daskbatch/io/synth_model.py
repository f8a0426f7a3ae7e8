"""The synthetic data's model and its default (NumPy Philox) stream: every row a function of ``(seed, row index)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BLOCK_ROWS", "MAX_COV_FEATURES", "SynthModel", "ground_truth", "make_model", "numpy_rows", "truth_attrs"]

#: Rows per internal generator block; fixed forever so data never change.
BLOCK_ROWS = 4096
#: Above this many features the covariance is left out of the attrs (JSON size).
MAX_COV_FEATURES = 256


@dataclass(frozen=True)
class SynthModel:
    """Parameters of the generator, drawn from ``seed`` (never from the row count)."""

    features: int
    classes: int | None
    mu: np.ndarray  # (Q,) base means
    scale: np.ndarray  # (Q,) base standard deviations
    informative: np.ndarray  # indices into the base features
    delta: np.ndarray  # (K, Q) class offsets, zero off the informative features
    priors: np.ndarray  # (K,)
    sources: np.ndarray  # (P, 2) base features each mixed feature combines
    weights: np.ndarray  # (P, 2)
    offset: np.ndarray  # (P,)
    noise: np.ndarray  # (P,)

    @property
    def n_base(self) -> int:
        """Count the base (unmixed) features."""
        return int(self.mu.shape[0])


def make_model(
    features: int, classes: int | None, informative: int | None, correlated: int, seed: int
) -> SynthModel:
    """Check the sizes and draw the generator's parameters from ``seed``."""
    if features < 1:
        raise ValueError(f"features must be >= 1, got {features}")
    if not 0 <= correlated < features:
        raise ValueError(
            f"correlated must be in [0, features - 1] = [0, {features - 1}], got {correlated}"
        )
    if classes is not None and classes < 2:
        raise ValueError(f"classes must be >= 2 (or None for no label), got {classes}")
    q = features - correlated
    if informative is None:
        informative = min(q, max(1, q // 4)) if classes else 0
    if informative and not classes:
        raise ValueError("informative features need classes=K (class-dependent means)")
    if not 0 <= informative <= q:
        raise ValueError(
            f"informative must be in [0, features - correlated] = [0, {q}], got {informative}"
        )
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    # Different means and scales per feature so that summaries look like real data.
    mu = np.round(rng.uniform(-20.0, 20.0, q), 3)
    scale = np.round(np.exp(rng.uniform(np.log(0.1), np.log(10.0), q)), 3)
    k = classes or 1
    inf_idx = np.sort(rng.choice(q, size=informative, replace=False)).astype(np.int64)
    delta = np.zeros((k, q))
    if classes:
        delta[:, inf_idx] = rng.uniform(-1.5, 1.5, (k, informative)) * scale[inf_idx]
    priors = np.arange(k, 2 * k, dtype=np.float64)  # mildly imbalanced: k : k+1 : ... : 2k-1
    priors /= priors.sum()
    sources = np.array(
        [rng.choice(q, size=2, replace=q < 2) for _ in range(correlated)], dtype=np.int64
    ).reshape(correlated, 2)
    weights = np.round(rng.uniform(-1.5, 1.5, (correlated, 2)), 3)
    offset = np.round(rng.uniform(-5.0, 5.0, correlated), 3)
    noise = np.round(rng.uniform(0.1, 1.0, correlated), 3)
    return SynthModel(
        features, classes, mu, scale, inf_idx, delta, priors, sources, weights, offset, noise
    )


def ground_truth(model: SynthModel) -> dict[str, np.ndarray]:
    """Population mean, covariance and class means of the model, in float64."""
    q, p = model.n_base, model.features - model.n_base
    w = np.zeros((p, q))
    for i, ((a, b), (wa, wb)) in enumerate(zip(model.sources, model.weights, strict=True)):
        w[i, a] += wa
        w[i, b] += wb
    dbar = model.priors @ model.delta
    centred = model.delta - dbar
    cov_b = np.diag(model.scale**2) + (centred.T * model.priors) @ centred
    mean_b = model.mu + dbar
    cov = np.empty((q + p, q + p))
    cov[:q, :q] = cov_b
    cov[:q, q:] = cov_b @ w.T
    cov[q:, :q] = w @ cov_b
    cov[q:, q:] = w @ cov_b @ w.T + np.diag(model.noise**2)
    mean = np.concatenate([mean_b, model.offset + w @ mean_b])
    class_b = model.mu + model.delta
    class_means = np.concatenate([class_b, model.offset + class_b @ w.T], axis=1)
    return {"mean": mean, "cov": cov, "class_means": class_means, "priors": model.priors}


def _block_rng(seed: int, block: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(seed, spawn_key=(1, block))))


def _labels_block(rng: np.random.Generator, model: SynthModel) -> np.ndarray:
    u = rng.random(BLOCK_ROWS)
    return np.minimum(
        np.searchsorted(np.cumsum(model.priors), u, side="right"), len(model.priors) - 1
    ).astype(np.int32)


def _x_block(
    seed: int, block: int, model: SynthModel, dtype: np.dtype, out: np.ndarray | None = None
) -> np.ndarray:
    """One full internal block of rows (BLOCK_ROWS x features), written into ``out`` if given."""
    rng = _block_rng(seed, block)
    y = _labels_block(rng, model) if model.classes else None
    x = rng.standard_normal((BLOCK_ROWS, model.features), dtype=dtype, out=out)
    q = model.n_base
    # One contiguous affine pass over all columns (mixed columns get their noise/offset).
    x *= np.concatenate([model.scale, model.noise]).astype(dtype)
    x += np.concatenate([model.mu, model.offset]).astype(dtype)
    if y is not None and len(model.informative):
        shift = np.zeros((len(model.priors), model.features), dtype=dtype)
        shift[:, :q] = model.delta
        x += shift[y]
    for i in range(model.features - q):
        (a, b), (wa, wb) = model.sources[i], model.weights[i]
        col = x[:, q + i]
        col += dtype.type(wa) * x[:, a]
        col += dtype.type(wb) * x[:, b]
    return x


def numpy_rows(
    seed: int, start: int, stop: int, model: SynthModel, dtype: np.dtype, what: str
) -> np.ndarray:
    """Make rows ``[start, stop)`` of X or y from the default stream, assembled from whole internal blocks."""
    if what == "x":
        out = np.empty((stop - start, model.features), dtype=dtype)
    else:
        out = np.empty((stop - start,), dtype=np.int32)
    for block in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        b0 = block * BLOCK_ROWS
        lo, hi = max(start, b0), min(stop, b0 + BLOCK_ROWS)
        if what == "y":
            out[lo - start : hi - start] = _labels_block(_block_rng(seed, block), model)[
                lo - b0 : hi - b0
            ]
        elif lo == b0 and hi == b0 + BLOCK_ROWS:
            _x_block(seed, block, model, dtype, out=out[lo - start : hi - start])  # no copy
        else:
            out[lo - start : hi - start] = _x_block(seed, block, model, dtype)[lo - b0 : hi - b0]
    return out


def truth_attrs(model: SynthModel, seed: int, rows: int, dtype: np.dtype) -> dict[str, Any]:
    """Describe the model and its ground truth as JSON-ready ``attrs["synth"]``."""
    truth = ground_truth(model)
    q = model.n_base
    out: dict[str, Any] = {
        "seed": seed,
        "rows": rows,
        "features": model.features,
        "dtype": str(dtype),
        "classes": model.classes,
        "informative": model.informative.tolist(),
        "correlated": list(range(q, model.features)),
        "correlated_sources": model.sources.tolist(),
        "true_mean": truth["mean"].tolist(),
        "true_std": np.sqrt(np.diag(truth["cov"])).tolist(),
        "block_rows": BLOCK_ROWS,
        "generator": "numpy Philox, SeedSequence(seed, spawn_key=(1, block))",
    }
    if model.features <= MAX_COV_FEATURES:
        out["true_cov"] = truth["cov"].tolist()
    if model.classes:
        out["class_priors"] = truth["priors"].tolist()
        out["class_means"] = truth["class_means"].tolist()
    return out


