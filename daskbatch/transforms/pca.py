"""Principal components from a summary's covariance, with no further pass over the data, and the step projecting onto them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from daskbatch._common import Array
from daskbatch.stats.numerics import as_float64, device, namespace
from daskbatch.transforms import digest, names_differ, origin_of

__all__ = ["PCA", "Project", "pca", "project"]


@dataclass(frozen=True, eq=False)
class PCA:
    """A fitted principal component analysis (host NumPy arrays, float64).

    Fitted attributes end in ``_``, as scikit-learn's ``PCA``'s do.

    Attributes
    ----------
    components_ : ndarray, shape (n_components, D)
        Principal axes, by decreasing explained variance.
    explained_variance_ : ndarray, shape (n_components,)
        Eigenvalues of the covariance with ``n - 1`` degrees of freedom.
    explained_variance_ratio_ : ndarray, shape (n_components,)
        Share of the total variance (trace of the covariance).
    singular_values_ : ndarray, shape (n_components,)
        ``sqrt(explained_variance_ * (n - 1))``, those of the centred data.
    mean_ : ndarray, shape (D,)
        Per-feature mean subtracted by :meth:`transform`.
    n_samples_ : int
        Rows the covariance was computed from (complete rows).
    feature_names : tuple of str
    method : {"eigh", "eigsh"}
        The eigensolver used.
    scale_ : ndarray, shape (D,) or None
        With ``correlation=True``, the population standard deviation each
        feature is divided by before the projection (None otherwise).
    whiten : bool
        Whether :meth:`transform` divides each component by the square root of
        its explained variance (unit-variance outputs).
    """

    components_: np.ndarray
    explained_variance_: np.ndarray
    explained_variance_ratio_: np.ndarray
    singular_values_: np.ndarray
    mean_: np.ndarray
    n_samples_: int
    feature_names: tuple[str, ...]
    method: str
    scale_: np.ndarray | None = None
    whiten: bool = False

    @property
    def n_components_(self) -> int:
        """Count the components.

        Returns
        -------
        int
            The number of components.
        """
        return int(self.components_.shape[0])

    def to_dataframe(self) -> Any:
        """Tabulate the components: their variances, and their loadings on every feature.

        Returns
        -------
        pandas.DataFrame
            One row per component (``pc1``, ``pc2``, ...; index ``component``):
            ``explained_variance``, ``explained_variance_ratio``,
            ``singular_value``, then one column per feature with its loading
            (the rows of ``components_``, columns named by feature).
        """
        import pandas as pd  # lazy: pandas

        index = pd.Index([f"pc{i + 1}" for i in range(self.n_components_)], name="component")
        table = pd.DataFrame({
            "explained_variance": self.explained_variance_,
            "explained_variance_ratio": self.explained_variance_ratio_,
            "singular_value": self.singular_values_,
        }, index=index)
        loadings = pd.DataFrame(self.components_, index=index, columns=pd.Index(self.feature_names, name="feature"))
        return pd.concat([table, loadings], axis=1)

    def transform(self, x: Array) -> Array:
        """Project a (rows, D) block (NumPy, CuPy or any array-API array) onto the components.

        Parameters
        ----------
        x : array
            The block, (rows, D).

        Returns
        -------
        array
            ``(x - mean_) / scale_ @ components_.T`` in float64 (without ``scale_``
            unless ``correlation=True``; divided by ``sqrt(explained_variance_)``
            when ``whiten``), in ``x``'s namespace and device.
        """
        xp = namespace(x)
        if x.ndim != 2 or x.shape[1] != self.mean_.shape[0]:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected (rows, {self.mean_.shape[0]})")
        dev = device(x)
        centred = as_float64(x) - xp.asarray(self.mean_, dtype=xp.float64, device=dev)
        if self.scale_ is not None:
            centred = centred / xp.asarray(self.scale_, dtype=xp.float64, device=dev)
        return xp.matmul(centred, xp.matrix_transpose(xp.asarray(self._projection(), dtype=xp.float64, device=dev)))

    def inverse_transform(self, z: Array) -> Array:
        """Map component scores back to the features (sklearn's ``inverse_transform``).

        Parameters
        ----------
        z : array
            Scores, (rows, n_components), as :meth:`transform` returns them.

        Returns
        -------
        array
            (rows, D) in float64: the data's projection onto the components'
            span, in the original units.
        """
        xp = namespace(z)
        if z.ndim != 2 or z.shape[1] != self.n_components_:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (rows, {self.n_components_})")
        dev = device(z)
        back = self.components_
        if self.whiten:
            back = back * np.sqrt(self.explained_variance_)[:, None]
        x = xp.matmul(as_float64(z), xp.asarray(back, dtype=xp.float64, device=dev))
        if self.scale_ is not None:
            x = x * xp.asarray(self.scale_, dtype=xp.float64, device=dev)
        return x + xp.asarray(self.mean_, dtype=xp.float64, device=dev)

    def _projection(self) -> np.ndarray:
        """The (n_components, D) matrix that :meth:`transform` multiplies by (whitened when asked)."""
        if not self.whiten:
            return self.components_
        root = np.sqrt(self.explained_variance_)
        return self.components_ / np.where(root > 0, root, 1.0)[:, None]


def pca(
    summary: Any,
    n_components: float,
    *,
    method: Literal["auto", "eigh", "eigsh"] = "auto",
    whiten: bool = False,
    correlation: bool = False,
) -> PCA:
    """Principal components of the data a summary describes, from its covariance.

    Parameters
    ----------
    summary : Summary
        With a covariance (``stats=[..., "cov"]``), in memory or tiled.
    n_components : int or float
        Components to keep: 1..D with ``eigh``, 1..D-1 with ``eigsh``; or a
        fraction in (0, 1): the fewest components whose explained variance
        ratios add up to more than it (as sklearn's; needs ``eigh``).
    method : {"auto", "eigh", "eigsh"}, default "auto"
        ``eigh`` decomposes the whole in-memory matrix; ``eigsh`` finds the
        leading eigenpairs with Lanczos (the only choice for a tiled
        covariance, and what ``"auto"`` picks for one).
    whiten : bool, default False
        Scale the scores to unit variance (sklearn's ``whiten``).
    correlation : bool, default False
        Decompose the correlation matrix instead: the features are first
        divided by their population standard deviation, as
        ``StandardScaler`` does (in-memory covariance only).

    Returns
    -------
    PCA
        The components, their variances and the mean.

    Notes
    -----
    The covariance counts complete rows only; ``mean_`` is the summary's
    per-feature mean (over each feature's finite values), which is the
    complete-row mean whenever no row holds a NaN or infinity. A tiled
    covariance brings its own complete-row mean.
    """
    names = tuple(summary.feature_names)
    d = len(names)
    if method not in ("auto", "eigh", "eigsh"):
        raise ValueError(f"method must be 'auto', 'eigh' or 'eigsh', got {method!r}")
    if summary.cov is not None:
        n = int(summary.cov_count)
        ddof = int(summary.provenance.get("ddof", 1))
        cov = np.asarray(summary.cov, dtype=np.float64)
        mean = np.asarray(summary.mean, dtype=np.float64)
        tiled = None
        method = "eigh" if method == "auto" else method
    elif summary.provenance.get("tiled_cov"):
        tiled = summary.tiled_cov()
        n, ddof, cov, mean = int(tiled.n), int(tiled.ddof), None, tiled.mean
        if method == "eigh":
            raise ValueError("the covariance is tiled (too large to hold): use method='eigsh' or 'auto'")
        method = "eigsh"
    else:
        raise ValueError("pca needs the covariance: describe(..., stats=[..., 'cov'])")
    top = d if method == "eigh" else d - 1
    fraction = _variance_fraction(n_components)
    if fraction is not None and method != "eigh":
        raise ValueError(f"n_components={n_components!r} (a variance fraction) needs the whole spectrum: method='eigh'")
    if fraction is None and (
        isinstance(n_components, bool) or int(n_components) != n_components or not 1 <= n_components <= top
    ):
        raise ValueError(
            f"n_components must be an integer in [1, {top}] for method {method!r} or a fraction in (0, 1), "
            f"got {n_components!r}"
        )
    if n - ddof <= 0 or n < 2:
        raise ValueError(f"pca needs at least 2 complete rows (and more than ddof={ddof}); the covariance has {n}")
    # sklearn's explained variance divides by n - 1 whatever ddof the summary used.
    scale = (n - ddof) / (n - 1.0)
    k = d if fraction is not None else int(n_components)
    feature_scale = None
    if correlation:
        if tiled is not None:
            raise ValueError("correlation=True needs the covariance in memory; this summary's is tiled")
        assert cov is not None
        # StandardScaler divides by the population std (ddof 0) of the same rows.
        feature_scale = np.sqrt(np.diag(cov) * (n - ddof) / n)
        if np.any(feature_scale == 0):
            flat = [names[i] for i in np.flatnonzero(feature_scale == 0)[:4]]
            raise ValueError(f"correlation=True: constant feature(s) {flat} have no correlation; select them out first")
        cov = cov / np.outer(feature_scale, feature_scale)
    if tiled is None:
        assert cov is not None
        if not np.all(np.isfinite(cov)):
            raise ValueError("the covariance holds NaN or inf values; pca needs a finite covariance")
        total = float(np.trace(cov)) * scale
        if method == "eigh":
            values, vectors = np.linalg.eigh(cov)
            values, vectors = values[::-1][:k], vectors[:, ::-1][:, :k]
        else:
            values, vectors = _lanczos(cov, d, k)
    else:
        import dask.array as da  # lazy: dask

        lazy = tiled.cov
        total = float(da.diagonal(lazy).sum().compute()) * scale
        values, vectors = _lanczos(_tiled_operator(lazy), d, k)
    values = np.maximum(values * scale, 0.0)  # rounding can leave -1e-17 where sklearn's S**2 is >= 0
    components = _flip_signs(vectors.T.copy())
    if fraction is not None:
        # sklearn's rule: the fewest components whose cumulative ratio exceeds the fraction.
        k = int(np.searchsorted(np.cumsum(values / total), fraction, side="right")) + 1
        values, components = values[:k], components[:k]
    return PCA(
        components_=components,
        explained_variance_=values,
        explained_variance_ratio_=values / total if total > 0 else np.full(k, np.nan),
        singular_values_=np.sqrt(values * (n - 1.0)),
        mean_=np.array(mean, dtype=np.float64),
        n_samples_=n,
        feature_names=names,
        method=method,
        scale_=feature_scale,
        whiten=bool(whiten),
    )


def _variance_fraction(n_components: Any) -> float | None:
    """The variance fraction that ``n_components`` asks for, or None for a count."""
    if isinstance(n_components, bool) or not isinstance(n_components, float | np.floating):
        return None
    if n_components == int(n_components) and n_components >= 1:
        return None  # 3.0 is a count
    if not 0 < n_components < 1:
        raise ValueError(f"n_components as a fraction of the variance must lie in (0, 1), got {n_components!r}")
    return float(n_components)


def _flip_signs(components: np.ndarray) -> np.ndarray:
    """Make the entry of largest magnitude of each row positive (sklearn's svd_flip on Vt)."""
    biggest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(components.shape[0]), biggest])
    signs[signs == 0] = 1.0
    return components * signs[:, None]


def _tiled_operator(lazy: Any) -> Any:
    """A LinearOperator ``v -> C v`` over a dask (D, D) matrix read from Zarr tile by tile."""
    from scipy.sparse.linalg import LinearOperator  # lazy: scipy

    d = int(lazy.shape[0])

    def matmat(v: np.ndarray) -> np.ndarray:
        # Each product is one dask computation: row tiles in parallel, each reading its chunks.
        return np.asarray(lazy.dot(np.asarray(v, dtype=np.float64)).compute())

    return LinearOperator((d, d), matvec=matmat, matmat=matmat, dtype=np.float64)


def _lanczos(op: Any, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenpairs of symmetric ``op``, by decreasing eigenvalue."""
    from scipy.sparse.linalg import eigsh  # lazy: scipy

    # A fixed start vector: the same input gives the same result, run after run.
    v0 = np.random.default_rng(0).standard_normal(d)
    values, vectors = eigsh(op, k=k, which="LA", v0=v0)
    order = np.argsort(values)[::-1]
    return values[order], vectors[:, order]


@dataclass(frozen=True, eq=False)
class Project:
    """Centred projection onto principal components: ``(x - pca.mean_) @ pca.components_.T`` in float64.

    Output columns are named ``pc1``, ``pc2``, ...
    """

    pca: Any
    origin: dict[str, Any] = field(default_factory=dict)

    def bind(self, names: tuple[str, ...]) -> Project:  # numpydoc ignore=PR01,RT01
        """Check that the input has the features the PCA was fitted on."""
        expected = tuple(self.pca.feature_names)
        if tuple(names) != expected:
            raise ValueError(
                f"project: the PCA was fitted on {names_differ(expected, tuple(names))}; "
                "project the features it was fitted on (a select step first, or a PCA of the selected features)"
            )
        return self

    def apply(self, block: Array) -> Array:  # numpydoc ignore=PR01,RT01
        """Project one block onto the components."""
        return self.pca.transform(block)

    def output_features(self, names: tuple[str, ...]) -> tuple[str, ...]:  # numpydoc ignore=PR01,RT01
        """Name the components ``pc1``, ``pc2``, ..."""
        self.bind(names)
        return tuple(f"pc{i + 1}" for i in range(self.pca.n_components_))

    def describe(self) -> dict[str, Any]:  # numpydoc ignore=RT01
        """Describe the step for the output's provenance."""
        return {
            "step": "project", "n_components": self.pca.n_components_, "features": len(self.pca.feature_names),
            "method": self.pca.method, "whiten": self.pca.whiten, "correlation": self.pca.scale_ is not None,
            "sha256": digest(self.pca.mean_, self.pca.components_, self.pca.explained_variance_, np.array([self.pca.whiten]),
                              *(() if self.pca.scale_ is None else (self.pca.scale_,))),
            "summary": self.origin,
        }


def project(pca_or_summary: Any, n_components: int | None = None) -> Project:
    """Make a step projecting onto principal components.

    Parameters
    ----------
    pca_or_summary : PCA or Summary
        A fitted :class:`~daskbatch.PCA`, or a summary with a covariance (then
        ``n_components`` is required and :func:`daskbatch.transforms.pca` fits it).
    n_components : int, optional
        Components to keep; required with a summary.

    Returns
    -------
    Project
        The step.
    """
    if hasattr(pca_or_summary, "components_"):
        if n_components is not None and n_components != pca_or_summary.n_components_:
            raise ValueError(f"the PCA has {pca_or_summary.n_components_} components, not {n_components}")
        return Project(pca_or_summary)
    if n_components is None:
        raise TypeError("project(summary, n_components): give the number of components")
    return Project(pca(pca_or_summary, n_components), origin=origin_of(pca_or_summary))
