// Data Storage on the FPGA: one buffer per transition field in board memory (DDR),
// rows of `row_bytes` bytes. Insertion scatters a packet of rows to their ring slots;
// sampling gathers the rows of a batch of indices into a packet for the learner.
// One work-item per byte: no arithmetic on the data, any field layout, no races
// (the slots of one insertion are distinct; gathers only read the store).

__kernel void ds_scatter(__global const uchar* rows, __global const long* slots, long row_bytes,
                         __global uchar* store) {
    long g = get_global_id(0);
    long r = g / row_bytes;
    long b = g - r * row_bytes;
    store[slots[r] * row_bytes + b] = rows[g];
}

__kernel void ds_gather(__global const uchar* store, __global const long* idx, long row_bytes,
                        __global uchar* out) {
    long g = get_global_id(0);
    long r = g / row_bytes;
    long b = g - r * row_bytes;
    out[g] = store[idx[r] * row_bytes + b];
}

// Sampling straight into the learner pipeline (setting 2, RM + DS + learner on the FPGA): `done`
// is stored as one byte per row and the loss stage reads it as a float.
__kernel void ds_gather_bool_f32(__global const uchar* store, __global const long* idx, __global float* out) {
    long r = get_global_id(0);
    out[r] = store[idx[r]] ? 1.0f : 0.0f;
}
