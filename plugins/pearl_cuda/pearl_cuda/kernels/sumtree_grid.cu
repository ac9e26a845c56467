// PEARL CUDA sum tree: the whole batched update in ONE cooperative launch.
//
// Same three phases as pearl_update_claim / _leaves / _level in sumtree.cu
// (this file includes it), separated by grid-wide syncs instead of separate
// launches. It must be launched cooperatively (cupy.RawModule with
// enable_cooperative_groups=True) with a grid whose blocks are all resident
// at once; pearl_cuda.sumtree launches at most one block per SM. Kept apart
// so that a toolchain without cooperative launch still loads sumtree.cu.

#include <cooperative_groups.h>
#include "sumtree.cu"

namespace cg = cooperative_groups;

extern "C" __global__ void pearl_update_grid(double* __restrict__ tree, const i64* __restrict__ off,
                                             const i64* __restrict__ spans, int levels, int fanout, i64 capacity,
                                             const i64* __restrict__ idx, const double* __restrict__ prio, i64 n,
                                             int* __restrict__ owner, int* __restrict__ err) {
    cg::grid_group grid = cg::this_grid();
    const i64 start = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    pearl_phase_claim(idx, n, capacity, owner, err, start, stride);
    grid.sync();
    pearl_phase_leaves(tree, off[levels], capacity, idx, prio, n, owner, err, start, stride);
    grid.sync();
    for (int l = levels - 1; l >= 0; --l) {
        pearl_phase_level(tree, off, l, fanout, spans[l], capacity, idx, n, start, stride);
        grid.sync();
    }
}
