"""``daskbatch info``: the GPU stack (CuPy, RMM, dask-cuda, CUDA versions) in text and JSON."""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version

import pytest
from click.testing import CliRunner

from daskbatch.cli import main
from daskbatch.cli.data_cmd import GPU_FAMILIES, matching_distributions

GPU_KEYS = ["cupy", "rmm", "dask-cuda", "cuda_runtime", "cuda_driver"]


def _installed(name: str) -> bool:
    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


def _has_cupy() -> bool:
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


def test_info_json_reports_the_gpu_stack():
    result = CliRunner().invoke(main, ["info", "--json"])
    assert result.exit_code == 0, result.output
    gpu = json.loads(result.output)["gpu"]
    assert list(gpu) == GPU_KEYS
    assert all(v is None or isinstance(v, str) for v in gpu.values())
    assert (gpu["dask-cuda"] is None) == (not _installed("dask-cuda"))
    if gpu["dask-cuda"] is not None:
        assert gpu["dask-cuda"] == f"dask-cuda {version('dask-cuda')}"
    if not _has_cupy():  # CPU machines: no CUDA versions without CuPy
        assert gpu["cuda_runtime"] is None and gpu["cuda_driver"] is None
    for key in ("cuda_runtime", "cuda_driver"):
        assert gpu[key] is None or re.fullmatch(r"\d+\.\d+", gpu[key])


def test_info_text_shows_a_dash_for_what_is_missing():
    result = CliRunner().invoke(main, ["info"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("GPU stack:")
    rows = dict(line.split(None, 1) for line in lines[start + 1 : start + 1 + len(GPU_KEYS)])
    assert list(rows) == GPU_KEYS
    if not _installed("dask-cuda"):
        assert rows["dask-cuda"] == "-"
    if not _has_cupy():
        assert rows["cuda_runtime"] == "-" and rows["cuda_driver"] == "-"


def test_any_cupy_distribution_is_found_even_when_cupy_does_not_import(tmp_path, monkeypatch):
    # Distribution metadata of CuPy for CUDA 13 and of RMM, with no module behind
    # them: a broken install, which info must still name.
    for dist, name in [("cupy_cuda13x-14.2.0", "cupy-cuda13x"), ("rmm_cu13-26.10.0", "rmm-cu13")]:
        info = tmp_path / f"{dist}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {dist.split('-')[1]}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if _has_cupy():
        pytest.skip("a real CuPy is importable here")
    result = CliRunner().invoke(main, ["info", "--json"])
    assert result.exit_code == 0, result.output
    gpu = json.loads(result.output)["gpu"]
    assert "cupy-cuda13x 14.2.0" in gpu["cupy"]
    assert "rmm-cu13 26.10.0" in gpu["rmm"]
    assert gpu["cuda_runtime"] is None and gpu["cuda_driver"] is None


@pytest.mark.parametrize(
    ("family", "names", "expected"),
    [
        ("cupy", ["cupy-cuda12x", "numpy"], "cupy-cuda12x 1"),
        ("cupy", ["cupy-cuda13x", "cupy-cuda11x"], "cupy-cuda11x 1, cupy-cuda13x 1"),  # both: a broken mix
        ("cupy", ["cupy"], "cupy 1"),  # conda-forge, or built from source
        ("cupy", ["cupy-rocm-5-0"], "cupy-rocm-5-0 1"),
        ("cupy", ["cupyx-extra"], None),
        ("rmm", ["rmm-cu12", "librmm-cu12"], "rmm-cu12 1"),
        ("rmm", ["rmm"], "rmm 1"),
        ("dask-cuda", ["dask-cudf-cu12"], None),
    ],
)
def test_family_patterns(family, names, expected):
    assert matching_distributions(GPU_FAMILIES[family], dict.fromkeys(names, "1")) == expected


def test_version_text():
    from daskbatch.cli.data_cmd import _version_text

    assert _version_text(12080) == "12.8" and _version_text(13000) == "13.0" and _version_text(12010) == "12.1"
