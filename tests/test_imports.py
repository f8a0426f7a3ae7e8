"""What importing daskbatch loads: nothing heavy until a name is used (PEP 562), no dask below the statistics.

Each probe runs in a fresh interpreter (as array-api-compat's ``test_no_dependencies``
does) and asserts what ``sys.modules`` holds, never seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Packages (and every module below them) that ``import daskbatch`` and the pure layers must not load.
HEAVY = (
    "dask", "distributed", "pandas", "xarray", "zarr", "numba", "scipy", "sklearn", "matplotlib", "cupy", "numba_cuda",
)


def _run(code: str) -> str:
    """The last line ``code`` prints in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def _loaded_after(code: str) -> list[str]:
    """The HEAVY packages with a module in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    return json.loads(_run(probe))


def test_import_daskbatch_loads_nothing_heavy() -> None:
    assert _loaded_after("import daskbatch") == []


def test_import_daskbatch_loads_neither_numpy_nor_the_statistics() -> None:
    # The dask setup's sizeof registration once imported every statistic (0.8 s) at `import daskbatch`.
    code = "import daskbatch, sys\nprint([m for m in ('numpy', 'daskbatch.stats') if m in sys.modules])"
    assert _run(code) == "[]"


def test_statistics_load_no_dask() -> None:
    assert _loaded_after("import daskbatch.stats") == []
    assert _loaded_after("import daskbatch.stats, daskbatch.planning.search") == []


def test_cli_help_loads_no_dask() -> None:
    code = "from click.testing import CliRunner\nfrom daskbatch.cli import main\nassert CliRunner().invoke(main, ['--help']).exit_code == 0"
    assert _loaded_after(code) == []


def test_dask_imported_later_gets_daskbatchs_settings_and_sizes() -> None:
    # daskbatch's defaults and its states' sizes are in dask from the first `import dask` on, whoever imports it
    code = (
        "import daskbatch.stats, numpy as np, sys\n"
        "import dask.config\nfrom dask.sizeof import sizeof\n"
        "from daskbatch._dask_setup import _AfterDaskFinder\n"
        "assert not any(isinstance(f, _AfterDaskFinder) for f in sys.meta_path)  # gone once dask is in\n"
        "assert type(sys.modules['dask'].__loader__).__module__.startswith(('importlib', '_frozen'))  # dask's own\n"
        "print(dask.config.get('daskbatch.max-classes'), sizeof(daskbatch.stats.Moments().chunk(np.ones((4, 100)))) > 800)"
    )
    assert _run(code) == "1000 True"


@pytest.mark.parametrize(
    "first",
    # dask before daskbatch; and the modules that the setup itself imports, imported first
    ["dask.config", "daskbatch.config", "daskbatch.stats._base", "daskbatch.engine.reduce"],
)
def test_any_import_order_gets_them_too(first: str) -> None:
    code = (
        f"import {first}\nimport dask.config, numpy as np\nfrom dask.sizeof import sizeof\nimport daskbatch.stats\n"
        "print(dask.config.get('daskbatch.max-classes'), sizeof(daskbatch.stats.Moments().chunk(np.ones((4, 100)))) > 800)"
    )
    assert _run(code) == "1000 True"


@pytest.mark.parametrize("name", __import__("daskbatch").__all__)
def test_every_public_name_resolves(name: str) -> None:
    import daskbatch

    assert getattr(daskbatch, name) is not None
    assert name in dir(daskbatch)


def test_functions_named_like_their_modules_stay_functions() -> None:
    code = (
        "import daskbatch as db, daskbatch.describing, daskbatch.transforms, daskbatch.selection, daskbatch.transforms.pca\n"
        "from daskbatch.summary.compare import compare\nfrom daskbatch.batches import map_batches\n"
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


def test_dir_lists_the_public_names_only() -> None:
    import daskbatch

    listed = set(dir(daskbatch))
    assert set(daskbatch.__all__) <= listed
    assert not listed & {"sys", "importlib", "types", "annotations", "TYPE_CHECKING", "Any"}


def test_describing_a_store_path_loads_no_xarray_pandas_or_pyarrow(tmp_path) -> None:  # noqa: ANN001
    # dask.array imported xarray (and with it pandas and pyarrow, ~0.5 s of every fresh process) only to
    # ask whether from_array was given a DataArray; the summary's warnings read labelled (pandas) counts.
    import dask.array as da
    import numpy as np
    import zarr

    import daskbatch as db

    rng = np.random.default_rng(3)
    root = zarr.open_group(tmp_path / "data.zarr", mode="w")
    root.create_array("X", data=(rng.normal(size=(3000, 5)) * 10 + 100).astype(np.float32), chunks=(700, 5))
    root.create_array("y", data=rng.integers(0, 3, size=3000).astype(np.int8), chunks=(700,))
    out = tmp_path / "arrays.npz"
    code = (
        f"import daskbatch as db, numpy as np, sys\ns = db.describe({str(tmp_path / 'data.zarr')!r}, label='y')\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'xarray', 'pandas', 'pyarrow'})\n"
        f"np.savez({str(out)!r}, **{{k: v for k, v in s.variables.items() if isinstance(v, np.ndarray)}})\n"
        "print(loaded)"
    )
    assert _run(code) == "[]"
    want = db.describe(da.from_zarr(root["X"]), label=da.from_zarr(root["y"]))
    with np.load(out, allow_pickle=False) as got:
        arrays = {k: v for k, v in want.variables.items() if isinstance(v, np.ndarray)}
        assert set(got.files) == set(arrays) and {"cov", "joint_counts", "quantile_counts"} <= set(arrays)
        for name, value in arrays.items():  # bitwise the dask array's
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_dask_array_still_takes_a_chunked_xarray_dataarray_as_its_dask_array() -> None:
    # The stand-in for xarray in dask.array.core answers isinstance without importing xarray, and is the
    # real xarray once it is imported (here after dask.array): from_array gives a DataArray's dask data back.
    code = (
        "import daskbatch, sys, numpy as np, dask.array as da\nfrom dask.array import core\n"
        "da.from_array(np.ones((4, 3)))\nbefore = 'xarray' in sys.modules\n"
        "import xarray as xr\na = xr.DataArray(np.ones((4, 3))).chunk(2)\n"
        "print(before, da.from_array(a) is a.data, core.xr.DataArray is xr.DataArray)"
    )
    assert _run(code) == "False True True"


def test_the_cli_describe_table_loads_no_pandas(tmp_path) -> None:  # noqa: ANN001
    # The printed table, its top pairs and MI ranking read the arrays; pandas (0.3-0.5 s) is for the
    # labelled results a Python user asks for, which the CLI never shows.
    import numpy as np
    import zarr

    rng = np.random.default_rng(5)
    root = zarr.open_group(tmp_path / "data.zarr", mode="w")
    root.create_array("X", data=rng.normal(size=(2000, 4)).astype(np.float32), chunks=(500, 4))
    root.create_array("y", data=rng.integers(0, 2, size=2000).astype(np.int8), chunks=(500,))
    code = (
        "import sys\nfrom daskbatch.cli import main\n"
        f"try:\n    main(['describe', {str(tmp_path / 'data.zarr')!r}, '--label', 'y'])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'xarray', 'pandas', 'pyarrow'}))"
    )
    assert _run(code) == "[]"
