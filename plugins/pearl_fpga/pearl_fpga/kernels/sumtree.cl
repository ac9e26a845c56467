// PEARL replay manager: an n-ary sum tree as a pipeline of one kernel per tree level.
//
// Structure (pearl-notes 3.3, the authors' oneAPI autorun design): levels 1..D below the
// root each live in their own buffer, owned by that level's kernel; the root is kept by
// the host. Requests travel between level kernels as packets:
//
//   sample  : {node, mass}   root -> leaves. `node` is the first child to scan at this
//             level, `mass` the residual mass. The leaf level writes the leaf index.
//   update  : {node, value}  leaves -> root. The host sorts and de-duplicates the leaf
//             indices (last value wins) and prepares, per level, the segments of packets
//             that share a parent (the "per-level index" of the paper's packet). A level
//             kernel writes its packets' values into its buffer, then sums the sibling
//             group of their parent and sends {parent, group sum} to the level above.
//   retrieve: {index} -> value, answered by the leaf level.
//
// On an FPGA the packet buffers are pipes/channels between free-running kernels and the
// level buffers are on-chip RAM. In this emulation the "pipe" is a global packet buffer
// handed from one level's launch to the next on an in-order queue, so a level kernel
// never runs before the level feeding it has finished.
//
// Updates re-compute parents from children instead of adding deltas: with priorities
// spanning 1e-30..1e30, delta updates cancel catastrophically (1e30 + 1 - 1e30 = 0),
// and the contract asks for leaves stored exactly and totals within 1e-9. Because every
// parent packet is unique per level and each work-item owns one sibling group, no two
// work-items ever write the same word: no atomics, no races, deterministic results.
//
// Priorities are float64 (the host checks the device's fp64 aspect).

#pragma OPENCL EXTENSION cl_khr_fp64 : enable

typedef struct { long node; double mass; } sample_pkt;
typedef struct { long node; double value; } update_pkt;

// Init packet: zero this level's buffer.
__kernel void rm_level_init(__global double* level, long width) {
    long i = get_global_id(0);
    if (i < width) level[i] = 0.0;
}

// Sampling stage of one level. `next_scale` is the fanout for inner levels (the packet
// sent down names the first child of the chosen node) and 1 at the leaf level (the
// packet then carries the leaf index). A mass at or past the group's sum (float drift,
// or a mass at the tree total) takes the last non-zero child and marks the packet with
// an infinite mass so that every lower level does the same: that is the contract's
// clamp to the last non-zero leaf. A zero-priority child is never chosen: the chosen
// child satisfies prefix + v > mass >= prefix, hence v > 0.
__kernel void rm_sample_level(__global const double* level, long width, long fanout,
                              long next_scale, __global sample_pkt* pkt, long n) {
    long r = get_global_id(0);
    if (r >= n) return;
    long first = pkt[r].node;
    double mass = pkt[r].mass;
    long end = first + fanout;
    if (end > width) end = width;
    double prefix = 0.0;
    long chosen = -1;
    long last_nonzero = first;
    for (long c = first; c < end; ++c) {
        double v = level[c];
        if (v > 0.0) last_nonzero = c;
        if (prefix + v > mass) { chosen = c; break; }
        prefix += v;
    }
    double residual;
    if (chosen >= 0) {
        residual = mass - prefix;
    } else {
        chosen = last_nonzero;
        residual = INFINITY;
    }
    pkt[r].node = chosen * next_scale;
    pkt[r].mass = residual;
}

// Update stage of one level. Work-item g owns the sibling group of the parent shared by
// packets seg[g] .. seg[g+1]-1 (sorted, unique nodes): it writes their values, then sends
// the parent's new sum {parent, sum of its children in order} up in out[g]. The sum is
// accumulated left to right, exactly as rm_sample_level accumulates its prefix, so a
// parent equals the scan's final prefix bit for bit.
__kernel void rm_update_level(__global double* level, long width, long fanout,
                              __global const update_pkt* in, long in_off,
                              __global const long* seg, long seg_off,
                              __global update_pkt* out, long out_off, long groups) {
    long g = get_global_id(0);
    if (g >= groups) return;
    in += in_off;
    seg += seg_off;
    out += out_off;
    long lo = seg[g], hi = seg[g + 1];
    for (long k = lo; k < hi; ++k) level[in[k].node] = in[k].value;
    long parent = in[lo].node / fanout;
    long first = parent * fanout;
    long end = first + fanout;
    if (end > width) end = width;
    double sum = 0.0;
    for (long c = first; c < end; ++c) sum += level[c];
    out[g].node = parent;
    out[g].value = sum;
}

// Retrieval at the leaf level (upper levels only forward the packet).
__kernel void rm_get_leaf(__global const double* leaf, __global const long* idx,
                          __global double* out, long n) {
    long r = get_global_id(0);
    if (r < n) out[r] = leaf[idx[r]];
}
