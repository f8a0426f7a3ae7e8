"""``daskbatch plan`` on real tiny Zarr stores, through click's CliRunner."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from daskbatch.cli import main
from daskbatch.cli.options import client_from_options, cluster_options


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "data.zarr"
    g = zarr.open_group(path, mode="w")
    x = g.create_array("X", shape=(10_000, 16), chunks=(1000, 16), dtype="float32")
    x[:] = np.random.default_rng(0).random((10_000, 16), dtype=np.float32)
    y = g.create_array("y", shape=(10_000,), chunks=(1000,), dtype="int32")
    y[:] = np.arange(10_000) % 3
    return str(path)


def run(*args):
    return CliRunner().invoke(main, ["plan", *args])


def test_plan_text(store):
    r = run(store, "--memory", "4GiB", "--threads", "2", "--stats", "moments,cov,hist")
    assert r.exit_code == 0, r.output
    assert "10,000 x 16 float32" in r.output
    assert "budget per task: 4.00 GiB x 0.5 / 2 threads - 256.00 MiB = 768.00 MiB" in r.output
    assert "2,000 rows (2 storage chunks)" in r.output  # 5 chunks >= 2 x 2 threads


def test_plan_json_with_label(store):
    r = run(store, "--memory", "2GiB", "--workers", "2", "--threads", "1", "--label", "y",
            "--n-classes", "3", "--bins", "8", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    # describe computes the quantile sketch whenever it finds histogram ranges itself
    assert d["stats"] == ["moments", "cov", "hist", "mi", "class_moments", "sketch"] and d["n_classes"] == 3
    assert d["chunk_rows"] % 1000 == 0 and d["task_bytes"] <= d["budget_bytes"]
    assert d["resources"] == {"memory_bytes": 2 * 2**30, "threads_per_worker": 1, "n_workers": 2,
                              "device_memory_bytes": None, "device": "cpu"}


def test_plan_classes_are_values_and_their_number_is_used(store):
    values = run(store, "--memory", "2GiB", "--label", "y", "--classes", "0,1,7", "--json")
    assert values.exit_code == 0, values.output
    assert json.loads(values.output)["n_classes"] == 3
    # One integer could be a count (what plan once took) or one class value: refused, one line.
    one = run(store, "--memory", "2GiB", "--label", "y", "--classes", "3", "--json")
    assert one.exit_code == 2
    assert one.output.strip().splitlines() == [
        "error: --classes takes class values (e.g. 0,1,2), and '3' is a single value; "
        "for a number of classes use --n-classes 3"
    ]
    both = run(store, "--memory", "2GiB", "--label", "y", "--classes", "0,1", "--n-classes", "3")
    assert both.exit_code == 2 and "--classes lists 2 values but --n-classes is 3" in both.output


def test_plan_without_label_skips_mi(store):
    r = run(store, "--memory", "4GiB", "--threads", "1")
    assert r.exit_code == 0, r.output
    assert "mi and class_moments skipped: the store has no label" in r.output


def test_plan_mi_without_classes_assumes_the_configured_number(store):
    r = run(store, "--label", "y", "--memory", "4GiB")
    assert r.exit_code == 0, r.output
    assert "planned for 32 (pass --n-classes K)" in r.output
    assert "32 classes" in r.output


def test_plan_error_exit_3_one_line(store):
    r = run(store, "--memory", "300MiB", "--threads", "1")
    assert r.exit_code == 3
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    # What is short, in positive numbers (never a negative budget).
    assert "300.00 MiB x 0.5 / 1 thread = 150.00 MiB per task, not more than the 256.00 MiB reserved" in lines[0]


def test_storage_chunk_too_big_exit_3(tmp_path):
    path = tmp_path / "wide.zarr"
    g = zarr.open_group(path, mode="w")
    x = g.create_array("X", shape=(40_000, 64), chunks=(40_000, 64), dtype="float64")
    x[:] = np.ones((40_000, 64))
    # budget 560 MiB x 0.5 - 256 MiB = 24 MiB < ~40 MiB for one 40,000 x 64 float64 chunk
    # (raw block + the centred float64 copy co-moments make)
    r = run(str(path), "--memory", "560MiB", "--threads", "1", "--stats", "cov")
    assert r.exit_code == 3, r.output
    assert "40,000-row chunk" in r.output and "rechunk" in r.output


def test_bad_inputs_exit_2(store, tmp_path):
    assert run(str(tmp_path / "missing.zarr")).exit_code == 2
    assert run(store, "--stats", "mean").exit_code == 2
    assert run(store, "--memory", "lots").exit_code == 2


def test_fraction_of_this_machine(store):
    r = run(store, "--memory", "0.5", "--threads", "1", "--stats", "moments", "--json")
    assert r.exit_code == 0, r.output
    import psutil

    assert json.loads(r.output)["resources"]["memory_bytes"] == int(
        psutil.virtual_memory().total * 0.5
    )


def test_cluster_options_and_helper():
    import click

    seen = {}

    @click.command()
    @cluster_options
    def cmd(cluster, address, scheduler_file, wait_for_workers):
        with client_from_options(cluster, address, scheduler_file, wait_for_workers=wait_for_workers) as client:
            seen["client"] = client

    r = CliRunner().invoke(cmd, ["--cluster", "threads"])
    assert r.exit_code == 0, r.output
    assert seen["client"] is None
    r = CliRunner().invoke(cmd, ["--address", "tcp://a:1", "--scheduler-file", "s.json"])
    assert r.exit_code == 2 and "not both" in r.output
    r = CliRunner().invoke(cmd, ["--cluster", "nonsense"])
    assert r.exit_code == 2


def test_cluster_options_local():
    import click

    seen = {}

    @click.command()
    @cluster_options
    def cmd(cluster, address, scheduler_file, wait_for_workers):
        kw = {"n_workers": 1, "processes": False, "dashboard_address": ":0", "wait_for_workers": wait_for_workers}
        with client_from_options(cluster, address, scheduler_file, **kw) as client:
            seen["n"] = len(client.scheduler_info()["workers"])
            seen["client"] = client

    r = CliRunner().invoke(cmd, ["--cluster", "local", "--wait-for-workers", "1"])
    assert r.exit_code == 0, r.output
    assert seen["n"] == 1 and seen["client"].status == "closed"
