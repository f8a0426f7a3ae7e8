"""The synthetic data's model and its default (NumPy Philox) stream: every row a function of ``(seed, row index)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BLOCK_ROWS", "counter_rows", "ground_truth", "make_model", "MAX_COV_FEATURES", "normals", "numpy_rows",
    "philox4x32", "SynthModel", "truth_attrs",
]

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


def make_model(features: int, classes: int | None, informative: int | None, correlated: int, seed: int) -> SynthModel:
    """Check the sizes and draw the generator's parameters from ``seed``."""
    if features < 1:
        raise ValueError(f"features must be >= 1, got {features}")
    if not 0 <= correlated < features:
        raise ValueError(f"correlated must be in [0, features - 1] = [0, {features - 1}], got {correlated}")
    if classes is not None and classes < 2:
        raise ValueError(f"classes must be >= 2 (or None for no label), got {classes}")
    q = features - correlated
    if informative is None:
        informative = min(q, max(1, q // 4)) if classes else 0
    if informative and not classes:
        raise ValueError("informative features need classes=K (class-dependent means)")
    if not 0 <= informative <= q:
        raise ValueError(f"informative must be in [0, features - correlated] = [0, {q}], got {informative}")
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
    sources = np.array([rng.choice(q, size=2, replace=q < 2) for _ in range(correlated)], dtype=np.int64).reshape(
        correlated, 2)
    weights = np.round(rng.uniform(-1.5, 1.5, (correlated, 2)), 3)
    offset = np.round(rng.uniform(-5.0, 5.0, correlated), 3)
    noise = np.round(rng.uniform(0.1, 1.0, correlated), 3)
    return SynthModel(features, classes, mu, scale, inf_idx, delta, priors, sources, weights, offset, noise)


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
    return np.minimum(np.searchsorted(np.cumsum(model.priors), u, side="right"), len(model.priors) - 1).astype(np.int32)


def _x_block(seed: int, block: int, model: SynthModel, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
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


def numpy_rows(seed: int, start: int, stop: int, model: SynthModel, dtype: np.dtype, what: str) -> np.ndarray:
    """Make rows ``[start, stop)`` of X or y from the default stream, assembled from whole internal blocks."""
    out = np.empty((stop - start, model.features), dtype) if what == "x" else np.empty(stop - start, np.int32)
    for block in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        b0 = block * BLOCK_ROWS
        lo, hi = max(start, b0), min(stop, b0 + BLOCK_ROWS)
        if what == "y":
            out[lo - start : hi - start] = _labels_block(_block_rng(seed, block), model)[lo - b0 : hi - b0]
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
        "seed": seed, "rows": rows, "features": model.features, "dtype": str(dtype), "classes": model.classes,
        "informative": model.informative.tolist(), "correlated": list(range(q, model.features)),
        "correlated_sources": model.sources.tolist(), "true_mean": truth["mean"].tolist(),
        "true_std": np.sqrt(np.diag(truth["cov"])).tolist(), "block_rows": BLOCK_ROWS,
        "generator": "numpy Philox, SeedSequence(seed, spawn_key=(1, block))",
    }
    if model.features <= MAX_COV_FEATURES:
        out["true_cov"] = truth["cov"].tolist()
    if model.classes:
        out["class_priors"] = truth["priors"].tolist()
        out["class_means"] = truth["class_means"].tolist()
    return out


#: Philox4x32 multipliers and Weyl key increments (Random123).
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LOW = 0xFFFFFFFF
#: The counter's stream word: the features and the label draw from disjoint counters.
X_STREAM, LABEL_STREAM = 0, 1


def philox4x32(xp: Any, counter: tuple[Any, Any, Any, Any], key: tuple[int, int]) -> tuple[Any, ...]:
    """Encrypt counters with Philox4x32 (10 rounds): four uint32 words in, four out, element by element."""
    c0, c1, c2, c3 = (xp.asarray(c, dtype=xp.uint64) for c in counter)
    k0, k1 = int(key[0]) & _LOW, int(key[1]) & _LOW
    low = xp.uint64(_LOW)
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & _LOW, (k1 + _W1) & _LOW
        # A 32 x 32 -> 64-bit product is exact in uint64: its high and low words are the round's mix.
        p0, p1 = c0 * xp.uint64(_M0), c2 * xp.uint64(_M1)
        c0, c1, c2, c3 = (p1 >> xp.uint64(32)) ^ c1 ^ xp.uint64(k0), p1 & low, (p0 >> xp.uint64(32)) ^ c3 ^ xp.uint64(k1), p0 & low
    return c0, c1, c2, c3


def _uniform53(xp: Any, hi: Any, lo: Any) -> Any:
    """A float64 in (0, 1) from two 32-bit words: 53 random bits, offset by half a step from 0."""
    bits = (hi >> xp.uint64(5)) * xp.uint64(1 << 26) + (lo >> xp.uint64(6))
    return (xp.astype(bits, xp.float64) + 0.5) * (2.0**-53)


def _key(seed: int) -> tuple[int, int]:
    """The Philox key of ``seed`` (SeedSequence-mixed, so nearby seeds give unrelated streams)."""
    words = np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(2, np.uint32)
    return int(words[0]), int(words[1])


def _counters(xp: Any, start: int, stop: int, columns: int, stream: int) -> tuple[Any, Any, Any, Any]:
    """Counter words of rows ``[start, stop)`` and ``columns`` column pairs: (pair, row low, row high, stream)."""
    rows = xp.arange(start, stop, dtype=xp.uint64)[:, None]
    pairs = xp.arange(columns, dtype=xp.uint64)[None, :]
    zeros = xp.zeros((stop - start, columns), dtype=xp.uint64)
    return pairs + zeros, (rows & xp.uint64(_LOW)) + zeros, (rows >> xp.uint64(32)) + zeros, zeros + xp.uint64(stream)


def normals(xp: Any, seed: int, start: int, stop: int, columns: int) -> Any:
    """Draw the standard normals of rows ``[start, stop)`` (Box–Muller on each column pair)."""
    pairs = (columns + 1) // 2
    w0, w1, w2, w3 = philox4x32(xp, _counters(xp, start, stop, pairs, X_STREAM), _key(seed))
    radius = xp.sqrt(-2.0 * xp.log(_uniform53(xp, w0, w1)))
    angle = (2.0 * np.pi) * _uniform53(xp, w2, w3)
    z = xp.stack([radius * xp.cos(angle), radius * xp.sin(angle)], axis=2)
    return xp.reshape(z, (stop - start, 2 * pairs))[:, :columns]


def _uniforms(xp: Any, seed: int, start: int, stop: int) -> Any:
    """Draw one uniform in (0, 1) per row of ``[start, stop)``, from the label stream."""
    w0, w1, _, _ = philox4x32(xp, _counters(xp, start, stop, 1, LABEL_STREAM), _key(seed))
    return _uniform53(xp, w0, w1)[:, 0]


def counter_rows(xp: Any, seed: int, start: int, stop: int, model: Any, dtype: Any) -> tuple[Any, Any]:
    """Make rows ``[start, stop)`` of X and y (None without classes) of ``model``, in namespace ``xp``."""
    dtype = np.dtype(dtype)
    x = xp.astype(normals(xp, seed, start, stop, model.features), xp.float32 if dtype == np.float32 else xp.float64)
    q = model.n_base
    scale = xp.asarray(np.concatenate([model.scale, model.noise]).astype(dtype))
    shift = xp.asarray(np.concatenate([model.mu, model.offset]).astype(dtype))
    x = x * scale + shift
    y = None
    if model.classes:
        cdf = xp.asarray(np.cumsum(model.priors))
        y = xp.astype(xp.clip(xp.searchsorted(cdf, _uniforms(xp, seed, start, stop), side="right"), 0, len(model.priors) - 1), xp.int32)
        if len(model.informative):
            delta = np.zeros((len(model.priors), model.features), dtype=dtype)
            delta[:, :q] = model.delta
            x = x + xp.take(xp.asarray(delta), xp.astype(y, xp.int64), axis=0)
    if model.features > q:
        mixed = []
        for i in range(model.features - q):
            (a, b), (wa, wb) = model.sources[i], model.weights[i]
            mixed.append(x[:, q + i] + dtype.type(wa) * x[:, a] + dtype.type(wb) * x[:, b])
        x = xp.concat([x[:, :q], xp.stack(mixed, axis=1)], axis=1)
    return x, y
