// PEARL CUDA sum tree: every kernel of the GPU replay manager, in one file.
//
// Loaded at run time by pearl_cuda.sumtree through cupy.RawModule (NVRTC) and
// compile-checked by the test suite with `nvcc --ptx -arch=sm_90`. The numpy
// emulation in pearl_cuda/emulation.py runs exactly these steps on the host;
// keep the two in step (same phases, same summation order).
//
// Layout (pearl_cuda/layout.py builds the offsets)
// ------------------------------------------------
// One float64 array, level by level, root first. Level l (0 = root, L = leaves)
// holds n_l nodes, n_L = capacity, n_l = ceil(n_{l+1} / F). The storage of
// level l+1 is padded to n_l * F slots (padding is always 0.0), so node j of
// level l owns exactly the F slots off[l+1] + j*F ... off[l+1] + j*F + F-1.
// Every level starts on a multiple of F (the root's level is padded to F
// slots), so for F = 16 one sibling group is one 128-byte line.
// Leaf i lives at off[L] + i; its ancestor at level l is i / F^(L-l).
//
// Sums are never updated by deltas: a node is recomputed from its children,
// in child order, whenever a leaf below it changes. So there is no drift, a
// node's value is a pure function of the current leaves (independent of the
// batch order, of duplicates and of the launch shape), and concurrent threads
// that recompute the same parent store the same value.
//
// Errors: kernels never read or write out of bounds. Bad input found on the
// device (only possible through the device API; the host API validates first)
// is skipped and reported by OR-ing a bit into *err, which the host reads when
// asked (SumTree.check_errors), so the fast path has no host round trip.

#define PEARL_ERR_INDEX 1     // an index < 0 or >= capacity
#define PEARL_ERR_PRIORITY 2  // a priority that is negative, NaN or infinite
#define PEARL_ERR_MASS 4      // a mass that is negative, NaN or past total * (1 + rtol)
#define PEARL_ERR_EMPTY 8     // sampling while every priority is zero

typedef long long i64;

// Finite and >= 0 (false for NaN). 1.7976931348623157e308 is DBL_MAX.
__device__ __forceinline__ bool pearl_valid_priority(double p) {
    return p >= 0.0 && p <= 1.7976931348623157e308;
}

// Walk from the root to a leaf for one mass. At each level pick the first
// child whose running inclusive sum exceeds x; a mass past the node's sum
// (float drift) takes the last non-zero child, and every level below it too.
__device__ __forceinline__ i64 pearl_descend(const double* __restrict__ tree, const i64* __restrict__ off,
                                             int levels, int fanout, double x) {
    i64 j = 0;
    for (int l = 1; l <= levels; ++l) {
        const double* kids = tree + off[l] + j * fanout;
        double partial = 0.0;
        int chosen = -1;
        int last_nonzero = 0;
        for (int c = 0; c < fanout; ++c) {
            double v = kids[c];
            if (v > 0.0) last_nonzero = c;
            if (chosen < 0) {
                double next = partial + v;
                if (next > x) chosen = c;
                else partial = next;
            }
        }
        if (chosen < 0) {
            chosen = last_nonzero;
            x = __longlong_as_double(0x7ff0000000000000LL);  // +inf: clamp below as well
        } else {
            x -= partial;
        }
        j = j * fanout + chosen;
    }
    return j;
}

// out[k] = leaf index for masses[k]; one thread per query (parallelism = batch size).
extern "C" __global__ void pearl_sample(const double* __restrict__ tree, const i64* __restrict__ off, int levels,
                                        int fanout, double mass_limit, const double* __restrict__ masses,
                                        i64* __restrict__ out, i64 n, int* __restrict__ err) {
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    double x = masses[k];
    double total = tree[0];
    if (!(total > 0.0)) {
        atomicOr(err, PEARL_ERR_EMPTY);
        out[k] = -1;
        return;
    }
    // mass_limit < 0 means "total * (1 + rtol)", computed here from the resident root.
    double limit = mass_limit >= 0.0 ? mass_limit : total * (1.0 + 1e-6);
    if (!(x >= 0.0 && x <= limit)) {
        atomicOr(err, PEARL_ERR_MASS);
        out[k] = -1;
        return;
    }
    out[k] = pearl_descend(tree, off, levels, fanout, x);
}

// out[k] = priority of leaf idx[k] (0.0 and a flag for an index out of range).
extern "C" __global__ void pearl_get(const double* __restrict__ tree, i64 leaf_off, i64 capacity,
                                     const i64* __restrict__ idx, double* __restrict__ out, i64 n,
                                     int* __restrict__ err) {
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    i64 i = idx[k];
    if (i < 0 || i >= capacity) {
        atomicOr(err, PEARL_ERR_INDEX);
        out[k] = 0.0;
        return;
    }
    out[k] = tree[leaf_off + i];
}

// ---------------------------------------------------------------------------
// Batched update: three phases, each a grid-stride loop over the batch.
//   1. claim:  owner[i] = max position k with idx[k] == i (atomicMax), so the
//              last occurrence of a repeated index wins, as the contract says.
//   2. leaves: the owner of each index writes its priority and resets
//              owner[i] to -1 (the scratch array is all -1 between calls).
//   3. levels: for l = L-1 down to 0, every item recomputes its ancestor at
//              level l from that ancestor's F children. Items that share the
//              ancestor store the identical value (same inputs, same order).
// A phase must see the previous one complete: separate launches
// (pearl_update_claim / _leaves / _level), __syncthreads in one block
// (pearl_update_block) or a grid-wide sync (pearl_update_grid in
// sumtree_grid.cu).
// ---------------------------------------------------------------------------

__device__ __forceinline__ void pearl_phase_claim(const i64* __restrict__ idx, i64 n, i64 capacity,
                                                  int* __restrict__ owner, int* __restrict__ err,
                                                  i64 start, i64 stride) {
    for (i64 k = start; k < n; k += stride) {
        i64 i = idx[k];
        if (i < 0 || i >= capacity) {
            atomicOr(err, PEARL_ERR_INDEX);
            continue;
        }
        atomicMax(owner + i, (int)k);
    }
}

__device__ __forceinline__ void pearl_phase_leaves(double* __restrict__ tree, i64 leaf_off, i64 capacity,
                                                   const i64* __restrict__ idx, const double* __restrict__ prio,
                                                   i64 n, int* __restrict__ owner, int* __restrict__ err,
                                                   i64 start, i64 stride) {
    for (i64 k = start; k < n; k += stride) {
        i64 i = idx[k];
        if (i < 0 || i >= capacity) continue;
        // volatile: the owner may be reset by another thread of this phase; any
        // value but k (including -1) means "not mine".
        if (((volatile int*)owner)[i] != (int)k) continue;
        double p = prio[k];
        if (pearl_valid_priority(p)) tree[leaf_off + i] = p;
        else atomicOr(err, PEARL_ERR_PRIORITY);
        owner[i] = -1;
    }
}

// Recompute the ancestors at level `level` (< L) of every item; span = F^(L - level).
__device__ __forceinline__ void pearl_phase_level(double* __restrict__ tree, const i64* __restrict__ off,
                                                  int level, int fanout, i64 span, i64 capacity,
                                                  const i64* __restrict__ idx, i64 n, i64 start, i64 stride) {
    const i64 child_off = off[level + 1];
    const i64 node_off = off[level];
    for (i64 k = start; k < n; k += stride) {
        i64 i = idx[k];
        if (i < 0 || i >= capacity) continue;
        i64 j = i / span;
        const volatile double* kids = tree + child_off + j * fanout;
        double s = 0.0;
        for (int c = 0; c < fanout; ++c) s += kids[c];
        tree[node_off + j] = s;
    }
}

extern "C" __global__ void pearl_update_claim(const i64* __restrict__ idx, i64 n, i64 capacity,
                                              int* __restrict__ owner, int* __restrict__ err) {
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    pearl_phase_claim(idx, n, capacity, owner, err, k, (i64)gridDim.x * blockDim.x);
}

extern "C" __global__ void pearl_update_leaves(double* __restrict__ tree, i64 leaf_off, i64 capacity,
                                               const i64* __restrict__ idx, const double* __restrict__ prio, i64 n,
                                               int* __restrict__ owner, int* __restrict__ err) {
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    pearl_phase_leaves(tree, leaf_off, capacity, idx, prio, n, owner, err, k, (i64)gridDim.x * blockDim.x);
}

extern "C" __global__ void pearl_update_level(double* __restrict__ tree, const i64* __restrict__ off, int level,
                                              int fanout, i64 span, i64 capacity, const i64* __restrict__ idx,
                                              i64 n) {
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    pearl_phase_level(tree, off, level, fanout, span, capacity, idx, n, k, (i64)gridDim.x * blockDim.x);
}

// All three phases in one launch of ONE block (__syncthreads between phases).
// spans[l] = F^(L - l) for l = 0 .. L-1.
extern "C" __global__ void pearl_update_block(double* __restrict__ tree, const i64* __restrict__ off,
                                              const i64* __restrict__ spans, int levels, int fanout, i64 capacity,
                                              const i64* __restrict__ idx, const double* __restrict__ prio, i64 n,
                                              int* __restrict__ owner, int* __restrict__ err) {
    const i64 start = threadIdx.x, stride = blockDim.x;
    pearl_phase_claim(idx, n, capacity, owner, err, start, stride);
    __syncthreads();
    pearl_phase_leaves(tree, off[levels], capacity, idx, prio, n, owner, err, start, stride);
    __syncthreads();
    for (int l = levels - 1; l >= 0; --l) {
        pearl_phase_level(tree, off, l, fanout, spans[l], capacity, idx, n, start, stride);
        __syncthreads();
    }
}

// Rebuild every node of level `level` (< L) from its children: one thread per
// node. Used after bulk loads (SumTree.load), one launch per level, leaves up.
extern "C" __global__ void pearl_rebuild_level(double* __restrict__ tree, const i64* __restrict__ off, int level,
                                               int fanout, i64 nodes) {
    i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nodes) return;
    const double* kids = tree + off[level + 1] + j * fanout;
    double s = 0.0;
    for (int c = 0; c < fanout; ++c) s += kids[c];
    tree[off[level] + j] = s;
}
