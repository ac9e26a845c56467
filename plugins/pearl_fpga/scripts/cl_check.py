"""Drive every kernel of pearl-fpga once through pyopencl, checking results against references.

The same host code as the backend (PipelinedSumTree, MLPPipeline) runs here on a
pyopencl context instead of dpctl, so that

* under pocl it yields the OpenCL compiler's messages (``dpctl.program`` build
  errors carry no log): ``python cl_check.py``;
* under oclgrind (``oclgrind_check.sh``) every access is bounds-checked and data
  races are reported.

Needs pyopencl (``pip install "pyopencl[pocl]"``) next to an installed pearl-fpga.
Exits non-zero on any mismatch or build error. Sizes are small because oclgrind
interprets every work-item.
"""

from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("PYOPENCL_COMPILER_OUTPUT", "1")  # print every build log (warnings included)


PLANTED = """
__kernel void planted_oob(__global float* a, long n) { long i = get_global_id(0); a[i + 1] = 1.0f; }
__kernel void planted_race(__global float* a) { a[0] += 1.0f; }
"""


def planted_bugs(rt) -> None:
    """A control for the checker: one out-of-bounds write and one race, which oclgrind must report."""
    buf = rt.alloc(4 * 16)
    rt.launch(rt.kernel(PLANTED, "planted_oob"), [16], [buf, np.int64(16)])
    rt.launch(rt.kernel(PLANTED, "planted_race"), [16], [buf])
    rt.finish()
    print("planted bugs launched (oclgrind should report an invalid write and a data race)")


def build_check(ctx) -> None:
    """Build every shipped source with -Werror and print the compiler's log (dpctl gives none)."""
    import pyopencl as cl

    from pearl_fpga.runtime import kernel_source

    for name, opts in (("sumtree.cl", ["-Werror"]), ("learner.cl", ["-Werror", "-DUF=4"])):
        prog = cl.Program(ctx, kernel_source(name)).build(options=opts)
        log = prog.get_build_info(ctx.devices[0], cl.program_build_info.LOG).strip()
        print(f"build {name} {' '.join(opts)}: ok, {len(prog.all_kernels())} kernels, log: {log or '(empty)'}")


def main() -> int:
    import pyopencl as cl

    from pearl_core.testing.reference import ReferenceSumTree
    from pearl_fpga.learner import MLPPipeline
    from pearl_fpga.runtime import PyOpenCLRuntime
    from pearl_fpga.sumtree import PipelinedSumTree

    platform = cl.get_platforms()[0]
    ctx = cl.Context(platform.get_devices()[:1])
    rt = PyOpenCLRuntime(ctx)
    print(f"device: {rt.description}")
    if "--planted-bugs" in sys.argv[1:]:
        planted_bugs(rt)
        return 0
    build_check(ctx)
    rng = np.random.default_rng(0)

    # -- replay manager: every level kernel, duplicates, shared ancestors, drift clamp --------------
    for capacity, fanout in ((61, 4), (300, 16), (37, 2)):
        tree, ref = PipelinedSumTree(capacity, fanout, runtime=rt), ReferenceSumTree(capacity, fanout)
        for _ in range(3):
            idx = rng.integers(0, capacity, size=40)
            idx[:5] = idx[0]                                   # duplicates: last wins
            prio = rng.integers(0, 20, size=40).astype(np.float64)
            tree.update(idx, prio)
            ref.update(idx, prio)
        got = tree.get(np.arange(capacity))
        assert np.array_equal(got, ref.priorities), "leaves differ from the reference"
        assert tree.total() == ref.total(), (tree.total(), ref.total())
        masses = np.r_[rng.uniform(0, ref.total(), 50), ref.prefix_sums()[:-1][:20], ref.total()]
        assert np.array_equal(tree.sample(masses), ref.sample(masses)), "samples differ from the reference"
        print(f"sum tree capacity={capacity} fanout={fanout} levels={tree.levels}: ok")

    # -- learner: FW, DQN loss, BW, WA, reduce, clip, Adam, SGD, Polyak -------------------------------
    dims = [4, 16, 16, 2]
    for dp, uf in ((1, 1), (3, 2)):
        pipe = MLPPipeline(dims, dp=dp, uf=uf, runtime=rt)
        weights = [(rng.normal(size=(b, a)).astype(np.float32) * 0.3, rng.normal(size=b).astype(np.float32) * 0.1)
                   for a, b in zip(dims, dims[1:])]
        pipe.write_params(pipe.params, weights)
        x = rng.normal(size=(8, 4)).astype(np.float32)
        h = x
        for k, (w, b) in enumerate(weights):
            h = h @ w.T + b
            h = np.maximum(h, 0) if k < len(weights) - 1 else h
        assert np.allclose(pipe.forward(x), h, rtol=1e-4, atol=1e-5), "forward differs from numpy"
        target = pipe.new_params(weights)
        n = 8
        pipe.enqueue_dqn(x, rng.integers(0, 2, n), rng.normal(size=n), rng.normal(size=(n, 4)),
                         (rng.random(n) < 0.3).astype(np.float32), np.ones(n), target_params=target, gamma=0.9,
                         huber_delta=1.0, double_dqn=dp > 1)
        pipe.enqueue_clip(0.1)
        pipe.enqueue_adam(1, 1e-3)
        pipe.enqueue_sgd(1e-3)
        pipe.enqueue_polyak(target, 0.5)
        flat = pipe.read_flat(pipe.params)
        assert np.isfinite(flat).all()
        print(f"learner dims={dims} dp={dp} uf={uf}: ok")
    rt.finish()
    print("cl_check: all kernels ran and matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
