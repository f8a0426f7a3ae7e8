"""Compile every numba-cuda kernel to PTX with the argument types its launch sites pass, without a GPU.

Usage::

    python tools/compile_cuda_kernels.py [--cc 9.0 --cc 8.0] [--dtypes float32,int64] [--no-ptxas]

numba's CUDA simulator runs the kernels without typing them, so a kernel that
numba cannot type (an atomic mixing int64 and float64 in a branch never taken,
a float64 index, an unsupported call) would first fail on a real GPU. This
tool closes that gap in two steps:

1. *record*: a subprocess under the simulator (``NUMBA_ENABLE_CUDASIM=1``)
   runs the launch sites of :mod:`daskbatch.stats.kernels._gpu` on small
   C-ordered chunks of every dtype the GPU path reads, weighted or not, with
   and without labels, through the histogram's shared and global layouts and
   several centring blocks, and records ``numba.typeof`` of each launch's
   arguments. A simulator device array is typed as numba types the device
   array a CuPy array becomes (its dtype, dimensions and layout ``C``/``F``/``A``
   from its flags). The CuPy path makes the chunk, the weights and every
   buffer C-contiguous (the simulator path does not, so the chunks fed here
   are C-ordered); the class codes and labels pass as the caller's array,
   so they are recorded both C-contiguous and strided (``A``). The device
   functions reached are recorded by name: they compile inside their callers.
2. *compile*: this process (no simulator) calls ``numba.cuda.compile_ptx`` on
   each (kernel, signature) for every compute capability asked for, and runs
   ``ptxas -v`` on the PTX when ``ptxas`` is found (``$PTXAS``, ``PATH``, or the
   ``nvidia`` wheels beside numba) for registers and spills.

Compiling needs NVVM and NVRTC (numba-cuda asks it for the supported
compute capabilities): the ``nvidia-nvvm`` and ``nvidia-cuda-nvrtc`` wheels or a
CUDA toolkit, not a driver. ``numba.cuda`` is made numba-cuda's, as on a GPU
install (``--builtin-target`` keeps numba's older built-in target). Prints one line per (kernel, signature, cc): ``OK``
with registers/spills, or ``FAIL`` and numba's error; exits 1 if any fails,
2 if NVVM cannot be found.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: dtypes the GPU path hands the kernels (bool arrives as its uint8 bytes; float16 stays on the CPU).
DTYPES = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float32", "float64")

#: The modules that hold the kernels.
MODULES = ("daskbatch.stats.kernels._cuda", "daskbatch.stats.kernels._cuda_moments")


# --- step 1: record, under the simulator ----------------------------------------------------------


def _arg_type(a: Any) -> list[Any]:
    """The JSON form of the numba type a launch argument gets on a GPU."""
    import numba  # lazy: the simulator must be chosen before numba.cuda is imported
    import numpy as np  # lazy: only the recording step needs it

    ary = getattr(a, "_ary", None)  # a simulator device array wraps its NumPy array
    if isinstance(a, np.ndarray) or ary is not None:
        host = a if ary is None else ary
        # What numba's DeviceNDArray types as (its flags, C before F), whatever NumPy's writeable flag says.
        layout = "C" if host.flags.c_contiguous else "F" if host.flags.f_contiguous else "A"
        return ["array", host.dtype.name, host.ndim, layout]
    return ["scalar", str(numba.typeof(a))]


def _chunks(dtype: str) -> Iterator[tuple[Any, Any]]:
    """A small chunk of ``dtype`` (C order, with NaN/inf where it is a float type) and positive weights."""
    import numpy as np  # lazy: only the recording step needs it

    rng = np.random.default_rng(0)
    base = rng.normal(size=(40, 5)) * 10
    if np.dtype(dtype).kind == "f":
        x = base.astype(dtype)
        x[3, 1], x[7, 2], x[9, 0] = np.nan, np.inf, -np.inf
    else:
        x = np.abs(np.round(base)).astype(dtype) if np.dtype(dtype).kind == "u" else np.round(base).astype(dtype)
    yield np.ascontiguousarray(x), rng.uniform(0.5, 2.0, size=x.shape[0])


def _drive(dtype: str) -> None:
    """Run every launch site of ``_gpu`` the dispatch can reach, for chunks of ``dtype``."""
    import numpy as np  # lazy: only the recording step needs it
    from numba import cuda  # lazy: the simulator is chosen by the environment of this subprocess

    from daskbatch.stats.kernels import _gpu  # lazy: imports numba.cuda

    for x, w in _chunks(dtype):
        dx = cuda.to_device(x)
        codes = cuda.to_device(np.arange(x.shape[0], dtype=np.int64) % 3)
        # The class codes / labels reach the kernels as the caller's array (not made C-contiguous):
        # a column of a 2-D array types as layout "A", another specialisation.
        strided = cuda.to_device(np.stack([np.zeros(x.shape[0], np.int64), np.arange(x.shape[0]) % 3], axis=1))[:, 1]
        lo, hi = np.full(x.shape[1], -5.0), np.full(x.shape[1], 5.0)
        for weights in (None, cuda.to_device(w)):
            _gpu.moments(dx, rows_per_group=8, weights=weights)
            _gpu.comoments(dx, rows_per_group=8, block_rows=16, weights=weights)
            for classes in (codes, strided):
                _gpu.class_moments(dx, classes, 3, weights=weights, rows_per_group=8)
            for labels, n_classes in ((None, 1), (codes, 3), (strided, 3)):
                for shared_bytes in (_gpu.SHARED_BYTES, 0):  # the shared-memory layout, then the global one
                    _gpu.histogram(dx, lo, hi, 6, labels, n_classes, shared_bytes=shared_bytes, weights=weights)


def record(dtypes: tuple[str, ...]) -> dict[str, Any]:
    """Run :func:`_drive` for each dtype with the simulator's launches recorded (in the simulator process)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel  # lazy: exists only under the simulator

    launches: dict[str, set[str]] = {}
    device_calls: set[str] = set()
    original = FakeCUDAKernel.__call__

    def recording(self: Any, *args: Any) -> Any:
        """Note the kernel's argument types (or the device function's name), then run it."""
        name = f"{self.fn.__module__}:{self.fn.__name__}"
        if self._device:
            device_calls.add(name)
        else:
            launches.setdefault(name, set()).add(json.dumps([_arg_type(a) for a in args]))
        return original(self, *args)

    FakeCUDAKernel.__call__ = recording
    try:
        for dtype in dtypes:
            _drive(dtype)
    finally:
        FakeCUDAKernel.__call__ = original
    return {"launches": {k: sorted(v) for k, v in launches.items()}, "device": sorted(device_calls)}


# --- step 2: compile, without the simulator --------------------------------------------------------


def _numba_type(spec: list[Any]) -> Any:
    """The numba type of a recorded argument."""
    import numpy as np  # lazy: only the compiling step needs it
    from numba import from_dtype, types  # lazy: only the compiling step needs it

    if spec[0] == "array":
        return types.Array(from_dtype(np.dtype(spec[1])), spec[2], spec[3])
    return getattr(types, spec[1])


def _declared(modules: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kernels and the device functions (name: dispatcher) defined in ``modules`` and their common module."""
    import importlib  # lazy: only the compiling step needs it

    kernels: dict[str, Any] = {}
    device: dict[str, Any] = {}
    for module in ("daskbatch.stats.kernels._cuda", *modules):
        mod = importlib.import_module(module)
        for attr, value in vars(mod).items():
            fn = getattr(value, "py_func", None)
            if fn is None or getattr(fn, "__module__", None) != module:
                continue
            name = f"{module}:{attr}"
            if getattr(value, "targetoptions", {}).get("device", False) or getattr(value, "_device", False):
                device[name] = value
            else:
                kernels[name] = value
    return kernels, device


def find_ptxas() -> list[str]:
    """Every executable ``ptxas``: ``$PTXAS``, on ``PATH``, in an ``nvidia`` wheel on ``sys.path``."""
    found = [os.environ.get("PTXAS", ""), shutil.which("ptxas") or ""]
    for entry in filter(None, sys.path):
        found += [str(p) for p in sorted(Path(entry).glob("nvidia/*/bin/ptxas"))]
    return [p for i, p in enumerate(found) if p and os.access(p, os.X_OK) and p not in found[:i]]


def use_numba_cuda() -> str:
    """Make ``numba.cuda`` the numba-cuda package, as its own ``.pth`` redirector does on a GPU install; which one it is.

    The project depends on numba-cuda (``numba-cuda>=0.20``), whose redirector only
    runs from a site directory: where numba-cuda sits on a plain ``sys.path`` entry,
    ``numba.cuda`` would be numba's older built-in target, which types some
    builtins differently (e.g. ``max(a, b)`` of floats fails there).
    """
    import importlib.util  # lazy: only the compiling step needs it

    if "numba.cuda" not in sys.modules and importlib.util.find_spec("numba_cuda") is not None:
        if not any(type(f).__name__ == "NumbaCudaFinder" for f in sys.meta_path):
            import _numba_cuda_redirector  # noqa: F401  # lazy: installs the numba.cuda -> numba_cuda finder
    from numba import cuda  # lazy: after the redirector

    return str(Path(cuda.__file__).parent)


def nvvm_missing() -> str | None:
    """Why NVVM cannot be used here, or None when ``compile_ptx`` works."""
    try:
        from numba import cuda  # lazy: only the compiling step needs it

        def _probe(a):  # noqa: ANN001, ANN202
            a[0] = 1.0

        cuda.compile_ptx(_probe, "void(float64[::1])", cc=(8, 0))
    except Exception as e:  # noqa: BLE001 - whatever numba raises when NVVM or its libdevice is absent
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


def _ptxas_info(candidates: list[str], ptx: str, cc: tuple[int, int]) -> str:
    """Registers, spills and stack of the kernel in ``ptx`` as ``ptxas -v`` reports them.

    ``candidates`` is narrowed in place to those that read this PTX version
    (an older ptxas than the NVVM that wrote it refuses it).
    """
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        while candidates:
            done = subprocess.run([candidates[0], f"-arch=sm_{cc[0]}{cc[1]}", "-v", str(src), "-o", str(Path(tmp) / "k.o")],
                                  capture_output=True, text=True, check=False)
            if done.returncode == 0 or "Unsupported .version" not in done.stderr:
                break
            candidates.pop(0)
        else:
            return "no ptxas here reads this PTX version"
    if done.returncode != 0:
        return "ptxas FAILED: " + " ".join(done.stderr.split())[:300]
    text = done.stderr
    regs = re.search(r"Used (\d+) registers", text)
    stores = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    stack = re.search(r"(\d+) bytes stack frame", text)
    return (f"regs={regs.group(1) if regs else '?'} spill={stores.group(1) + '/' + stores.group(2) if stores else '?'}"
            f" stack={stack.group(1) if stack else '?'}")


class _Card:
    """What numba reads of the current device when it compiles a device function: its compute capability."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc


@contextlib.contextmanager
def _compiling_for(cc: tuple[int, int], device: list[Any]) -> Iterator[None]:
    """Compile the device functions in ``device`` anew, for ``cc`` and with no driver.

    numba asks the current device for the compute capability of a device
    function a kernel calls, which needs a driver; ``compile_ptx`` itself does not.
    """
    from numba.cuda import dispatcher  # lazy: only the compiling step needs it

    for fn in device:  # else the overloads compiled for the previous cc would be linked in
        fn.overloads.clear()
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Card(cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def compile_all(recorded: dict[str, Any], ccs: list[tuple[int, int]], ptxas: list[str],
                emit: Callable[[str], None] = print) -> int:
    """Compile each recorded (kernel, signature) for each of ``ccs``; the number of failures."""
    from numba import cuda, types  # lazy: only the compiling step needs it

    kernels, device = _declared(MODULES)
    failures = 0
    for name in sorted(set(kernels) - set(recorded["launches"])):
        emit(f"FAIL {name}: never launched by the recorded launch sites (add a variant to tools/compile_cuda_kernels.py)")
        failures += 1
    for name in sorted(set(device) - set(recorded["device"])):
        emit(f"NOTE {name}: device function no recorded launch reaches (not compiled: it compiles inside its callers)")
    jobs = []
    for name, sigs in sorted(recorded["launches"].items()):
        if name not in kernels:
            emit(f"FAIL {name}: launched but not found among the kernels of {', '.join(MODULES)}")
            failures += 1
            continue
        for sig in sigs:
            jobs.append((name, tuple(_numba_type(s) for s in json.loads(sig))))
    for cc in ccs:
        with _compiling_for(cc, list(device.values())):
            for name, argtypes in jobs:
                label = f"{name.split(':')[1]:<18} sm_{cc[0]}{cc[1]} ({', '.join(str(t) for t in argtypes)})"
                try:
                    ptx, _ = cuda.compile_ptx(kernels[name].py_func, types.void(*argtypes), cc=cc)
                except Exception as e:  # noqa: BLE001 - report every kernel's typing error, not just the first
                    emit(f"FAIL {label}: {type(e).__name__}: {' '.join(str(e).split())[:600]}")
                    failures += 1
                    continue
                info = _ptxas_info(ptxas, ptx, cc) if ptxas else "ptxas not run"
                bad = info.startswith("ptxas FAILED")
                failures += bad
                emit(f"{'FAIL' if bad else 'OK  '} {label}: {info}")
    return failures


def _record_in_simulator(dtypes: tuple[str, ...]) -> dict[str, Any]:
    """Run :func:`record` in a subprocess with ``NUMBA_ENABLE_CUDASIM=1``; its JSON result."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import compile_cuda_kernels as t; "
            "print(json.dumps(t.record(tuple(sys.argv[2].split(',')))))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), ",".join(dtypes)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"recording under the simulator failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Record, compile, print; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", action="append", help="compute capability, e.g. 9.0 (default: 9.0 and 8.0)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="chunk dtypes to record (comma-separated)")
    parser.add_argument("--no-ptxas", action="store_true", help="skip ptxas (no register/spill report)")
    parser.add_argument("--builtin-target", action="store_true",
                        help="compile with numba's built-in numba.cuda even where numba-cuda is installed")
    args = parser.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("run without NUMBA_ENABLE_CUDASIM=1: compiling needs numba's real CUDA target", file=sys.stderr)
        return 2
    if args.builtin_target:
        from numba import cuda  # lazy: imported before any redirector can run

        print(f"numba.cuda: {Path(cuda.__file__).parent}")
    else:
        print(f"numba.cuda: {use_numba_cuda()}")
    missing = nvvm_missing()
    if missing:
        print(f"NVVM (or NVRTC) not usable, nothing compiled: {missing}", file=sys.stderr)
        return 2
    ccs = [tuple(int(p) for p in c.split(".")) for c in (args.cc or ["9.0", "8.0"])]
    recorded = _record_in_simulator(tuple(d for d in args.dtypes.split(",") if d))
    ptxas = [] if args.no_ptxas else find_ptxas()
    failures = compile_all(recorded, ccs, ptxas)  # type: ignore[arg-type]
    total = sum(len(s) for s in recorded["launches"].values()) * len(ccs)
    print(f"{total - failures} of {total} compiled" + ("" if failures == 0 else f"; {failures} FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
