"""What importing daskbatch loads: nothing heavy until a name is used (PEP 562), no dask below the statistics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("dask.array", "distributed", "pandas", "xarray", "zarr", "numba", "scipy", "matplotlib", "cupy")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_daskbatch_loads_nothing_heavy() -> None:
    assert _loaded_after("import daskbatch") == []
    # ... but daskbatch's settings are in dask.config at once
    probe = "import daskbatch, dask.config; print(dask.config.get('daskbatch.max-classes'))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1000"


def test_statistics_load_no_dask() -> None:
    loaded = _loaded_after("import daskbatch.stats, daskbatch.planning.search")
    assert not {"dask.array", "distributed", "zarr", "xarray", "cupy"} & set(loaded), loaded


@pytest.mark.parametrize("name", __import__("daskbatch").__all__)
def test_every_public_name_resolves(name: str) -> None:
    import daskbatch

    assert getattr(daskbatch, name) is not None
    assert name in dir(daskbatch)


def test_functions_named_like_their_modules_stay_functions() -> None:
    code = (
        "import daskbatch as db, daskbatch.describe, daskbatch.transforms, daskbatch.selection, daskbatch.transforms.pca\n"
        "import warnings; warnings.simplefilter('ignore', DeprecationWarning)\n"
        "import daskbatch.transform, daskbatch.select, daskbatch.pca  # moved paths, served as the new modules\n"
        "from daskbatch.summary.compare import compare\nfrom daskbatch.map_batches import map_batches\n"
        "names = ('describe', 'transform', 'select', 'pca', 'compare', 'map_batches')\n"
        "assert all(callable(getattr(db, n)) and type(getattr(db, n)).__name__ == 'function' for n in names)\n"
        "import dask.config\nassert dask.config.get('daskbatch.max-classes') == 1000  # defaults loaded on use\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_name_is_an_attribute_error() -> None:
    import daskbatch

    with pytest.raises(AttributeError, match="has no attribute 'describ'"):
        daskbatch.describ  # noqa: B018


def test_all_lists_every_lazy_name() -> None:
    import daskbatch

    assert set(daskbatch.__all__) == set(daskbatch._LAZY) | {"__version__"}
