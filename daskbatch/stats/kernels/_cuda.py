"""What every GPU loop (numba-cuda) shares: the element load, the rows of a group, correctly rounded arithmetic.

The loops live beside this module, one job each: moments
(:mod:`~daskbatch.stats.kernels._cuda_moments`), per-class moments
(:mod:`~daskbatch.stats.kernels._cuda_class_moments`), co-moment centring
(:mod:`~daskbatch.stats.kernels._cuda_comoments`) and histogram counting
(:mod:`~daskbatch.stats.kernels._cuda_histogram`); the device functions here are
compiled into them. Each takes sample weights (``weighted``, ``w``) as well. numba's cache checks the time stamp of a loop's own file only:
after editing this module clear the cache (``find daskbatch -name '*.nbi' -delete``).

Device code only; launch configurations, buffers and the finishing steps are
in :mod:`daskbatch.stats.kernels._gpu`. Every kernel reads the chunk (R, D) in its
own dtype and casts each element to float64 as it is loaded, like the CPU
loops of :mod:`daskbatch.stats.kernels._numba`: no float64 copy of the chunk exists.

Layout of the work: the chunk is row-major, so consecutive threads take
consecutive features (``j``) of the same row and their loads coalesce. A grid
row (``blockIdx.y = g``) takes a group of consecutive rows; each thread walks
its group serially and writes its partial results to ``[g, j]`` of a small
(G, D) buffer, which a second kernel folds in the order g = 0, 1, ... . No
floating-point atomics are used outside weighted histograms: results are bitwise
reproducible from run to run. Histogram counts are integers and use atomics
(exact in any order); weighted histograms add float64 weights with atomics, so
their sums are reproducible to rounding only (exactly where every sum is exact,
e.g. integer weights).

Checking that they compile without a GPU: the simulator runs the loops as Python
and never types them, so a loop numba cannot type would first fail on a card.
``python tools/compile_cuda_kernels.py`` records the argument types of every
launch under the simulator (every dtype, weighted or not, by label or not) and
compiles each kernel to PTX for cc 9.0 and 8.0 with numba-cuda, then reports
ptxas' registers and spills; it needs NVVM and NVRTC (their ``nvidia-*`` wheels),
not a driver. ``tests/test_cuda_compile.py`` runs it where NVVM is found.

The kernels are compiled with ``cache=True``: a worker that starts again loads
them from numba's cache beside their files instead of compiling them anew.

Rounding: NVVM contracts ``a * b + c`` into one fused multiply-add unless told
not to. Where the array-API reference rounds twice and the result must match
bit for bit (the histogram's bin edges ``i * step + lo``), the products and
sums go through :func:`_mul_rn` / :func:`_add_rn` (libdevice's correctly
rounded, never contracted ``__dmul_rn``/``__dadd_rn``). Under numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``, used by the CPU tests) libdevice is not
available and plain Python arithmetic, which rounds every operation, stands in.
"""

from __future__ import annotations

import numba
from numba import config, cuda

SIMULATED = bool(getattr(config, "ENABLE_CUDASIM", False))  # set by NUMBA_ENABLE_CUDASIM=1

if SIMULATED:  # Python floats round every operation, as __dmul_rn/__dadd_rn do

    @cuda.jit(device=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return a * b

    @cuda.jit(device=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return a + b

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _mul_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dmul_rn(a, b)

    @cuda.jit(device=True, inline=True)
    def _add_rn(a, b):  # noqa: ANN001, ANN202
        return libdevice.dadd_rn(a, b)


@cuda.jit(device=True)
def _load(x, i, j):  # noqa: ANN001, ANN202
    return numba.float64(x[i, j])


@cuda.jit(device=True)
def _rows_of_group(g, rows_per_group, rows):  # noqa: ANN001, ANN202
    start = g * rows_per_group
    return start, min(start + rows_per_group, rows)
