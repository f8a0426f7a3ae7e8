"""A counter-based stream for :func:`daskbatch.synth` written in the array API, so that GPUs generate on the device."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["counter_rows", "normals", "philox4x32"]

#: Philox4x32 multipliers and Weyl key increments (Random123).
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LOW = 0xFFFFFFFF
#: The counter's stream word: the features and the label draw from disjoint counters.
X_STREAM, LABEL_STREAM = 0, 1


def philox4x32(xp: Any, counter: tuple[Any, Any, Any, Any], key: tuple[int, int], rounds: int = 10) -> tuple[Any, ...]:
    """Encrypt counters with Philox4x32 (10 rounds): four uint32 words in, four out, element by element."""
    c0, c1, c2, c3 = (xp.asarray(c, dtype=xp.uint64) for c in counter)
    k0, k1 = int(key[0]) & _LOW, int(key[1]) & _LOW
    low = xp.uint64(_LOW)
    for r in range(rounds):
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
