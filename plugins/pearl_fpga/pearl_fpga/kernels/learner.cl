// PEARL learner pipeline for nn.Linear stacks (float32, like torch's default).
//
// Stages (pearl-notes 4.4): FW per layer -> loss -> BW and WA per layer (in reverse) ->
// gradient reduction over pipelines -> clip -> weight update (SGD or Adam).
//
// DP: the number of parallel pipelines. Stages launch dp * width work-items (1-D, so that
//     SYCL's reversed multi-dimensional ranges cannot reorder them); work-item
//     g = p * width + j is unit j of pipeline p. Pipeline p
//     handles samples p, p+DP, p+2*DP, ... and keeps its own gradient accumulators
//     (grad_part[p][...]); grad_reduce sums them in pipeline order, so the result does
//     not depend on scheduling (deterministic, no atomics).
// UF: the per-stage unroll factor, a compile-time macro (-DUF=n). On an FPGA it is the
//     number of MAC units a stage instantiates; in emulation it only unrolls the loop.
//
// Parameters of all layers live in one flat buffer; layer l's weight (out x in, row-major,
// torch's nn.Linear layout) starts at `w_off`, its bias right after it.
// As with the replay manager, each stage is a separate launch on an in-order queue: the
// activation buffers stand in for the FPGA's inter-stage pipes.

#ifndef UF
#define UF 1
#endif

// FW: y[s, j] = act(b[j] + sum_i x[s, i] * W[j, i]); one work-item per (pipeline, output neuron).
__kernel void fw_linear(__global const float* x, long in_dim, __global const float* params, long w_off,
                        __global float* y, long out_dim, long batch, int relu, long dp) {
    long g = get_global_id(0);
    if (g >= dp * out_dim) return;
    long p = g / out_dim, j = g % out_dim;
    __global const float* w = params + w_off + j * in_dim;
    float bias = params[w_off + out_dim * in_dim + j];
    for (long s = p; s < batch; s += dp) {
        __global const float* xs = x + s * in_dim;
        float acc = 0.0f;
        #pragma unroll UF
        for (long i = 0; i < in_dim; ++i) acc += xs[i] * w[i];
        acc += bias;
        y[s * out_dim + j] = (relu && !(acc > 0.0f)) ? 0.0f : acc;
    }
}

// Loss stage (DQN, importance weighted): one work-item per sample.
//   target = r                       if done
//          = r + gamma * Q'(s', a*)  otherwise, a* = argmax of q_sel (target or online net)
//   delta  = Q(s, a) - target;  td = |delta|
//   loss_s = w_s * huber(delta) (or w_s * delta^2 when huber_delta <= 0);  mean over the batch
//   dq[s, :] = 0 except dq[s, a] = w_s * dloss/ddelta / batch
__kernel void dqn_loss(__global const float* q, __global const float* q_next, __global const float* q_sel,
                       long n_actions, __global const long* act, __global const float* rew,
                       __global const float* done, __global const float* weight,
                       float gamma, float huber_delta, long batch,
                       __global float* dq, __global float* td, __global float* loss) {
    long s = get_global_id(0);
    if (s >= batch) return;
    __global const float* sel = q_sel + s * n_actions;
    long best = 0;
    for (long a = 1; a < n_actions; ++a) if (sel[a] > sel[best]) best = a;
    float next = q_next[s * n_actions + best];
    float target = done[s] != 0.0f ? rew[s] : rew[s] + gamma * next;
    long a_s = act[s];
    float delta = q[s * n_actions + a_s] - target;
    float ad = fabs(delta);
    float l, g;
    if (huber_delta > 0.0f) {
        if (ad < huber_delta) { l = 0.5f * delta * delta; g = delta; }
        else { l = huber_delta * (ad - 0.5f * huber_delta); g = delta > 0.0f ? huber_delta : -huber_delta; }
    } else {
        l = delta * delta; g = 2.0f * delta;
    }
    for (long a = 0; a < n_actions; ++a) dq[s * n_actions + a] = 0.0f;
    dq[s * n_actions + a_s] = weight[s] * g / (float)batch;
    td[s] = ad;
    loss[s] = weight[s] * l;
}

// BW: dx[s, i] = relu'(x[s, i]) * sum_j dy[s, j] * W[j, i]; x is the layer's (post-ReLU) input.
__kernel void bw_linear(__global const float* dy, long out_dim, __global const float* params, long w_off,
                        __global const float* x, __global float* dx, long in_dim, long batch, long dp) {
    long g = get_global_id(0);
    if (g >= dp * in_dim) return;
    long p = g / in_dim, i = g % in_dim;
    __global const float* w = params + w_off + i;
    for (long s = p; s < batch; s += dp) {
        __global const float* dys = dy + s * out_dim;
        float acc = 0.0f;
        #pragma unroll UF
        for (long j = 0; j < out_dim; ++j) acc += dys[j] * w[j * in_dim];
        dx[s * in_dim + i] = x[s * in_dim + i] > 0.0f ? acc : 0.0f;
    }
}

// WA: this pipeline's share of dW[j, i] = sum_s dy[s, j] * x[s, i] and db[j] = sum_s dy[s, j].
__kernel void wa_linear(__global const float* dy, long out_dim, __global const float* x, long in_dim,
                        __global float* grad_part, long n_params, long w_off, long batch, long dp) {
    long g = get_global_id(0);
    if (g >= dp * out_dim) return;
    long p = g / out_dim, j = g % out_dim;
    __global float* gw = grad_part + p * n_params + w_off + j * in_dim;
    #pragma unroll UF
    for (long i = 0; i < in_dim; ++i) {
        float acc = 0.0f;
        for (long s = p; s < batch; s += dp) acc += dy[s * out_dim + j] * x[s * in_dim + i];
        gw[i] = acc;
    }
    float accb = 0.0f;
    for (long s = p; s < batch; s += dp) accb += dy[s * out_dim + j];
    grad_part[p * n_params + w_off + out_dim * in_dim + j] = accb;
}

// Gradient reduction over the DP pipelines, in pipeline order (deterministic).
__kernel void grad_reduce(__global const float* grad_part, long dp, long n_params, __global float* grad) {
    long k = get_global_id(0);
    if (k >= n_params) return;
    float acc = 0.0f;
    for (long p = 0; p < dp; ++p) acc += grad_part[p * n_params + k];
    grad[k] = acc;
}

// Squared gradient norm, first pass: chunk c sums grad[c*chunk .. (c+1)*chunk).
__kernel void sqnorm_partial(__global const float* grad, long n_params, long chunk, __global float* part) {
    long c = get_global_id(0);
    long lo = c * chunk, hi = lo + chunk;
    if (hi > n_params) hi = n_params;
    float acc = 0.0f;
    for (long k = lo; k < hi; ++k) acc += grad[k] * grad[k];
    part[c] = acc;
}

// Second pass (one work-item): coef = min(1, max_norm / (norm + 1e-6)), torch's clip_grad_norm_;
// max_norm <= 0 disables clipping (coef 1). coef[1] holds the norm.
__kernel void clip_coef(__global const float* part, long n_parts, float max_norm, __global float* coef) {
    if (get_global_id(0) != 0) return;
    float acc = 0.0f;
    for (long c = 0; c < n_parts; ++c) acc += part[c];
    float norm = sqrt(acc);
    float k = 1.0f;
    if (max_norm > 0.0f) { k = max_norm / (norm + 1e-6f); if (k > 1.0f) k = 1.0f; }
    coef[0] = k;
    coef[1] = norm;
}

// Weight update, Adam (torch.optim.Adam, no weight decay, no amsgrad). Host passes
// step_size = lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t).
__kernel void adam_step(__global float* params, __global const float* grad, __global const float* coef,
                        __global float* m, __global float* v, long n_params,
                        float beta1, float beta2, float eps, float step_size, float bc2_sqrt) {
    long k = get_global_id(0);
    if (k >= n_params) return;
    float g = grad[k] * coef[0];
    float mk = m[k] + (1.0f - beta1) * (g - m[k]);
    float vk = beta2 * v[k] + (1.0f - beta2) * g * g;
    m[k] = mk;
    v[k] = vk;
    params[k] -= step_size * mk / (sqrt(vk) / bc2_sqrt + eps);
}

// Weight update, plain SGD.
__kernel void sgd_step(__global float* params, __global const float* grad, __global const float* coef,
                       long n_params, float lr) {
    long k = get_global_id(0);
    if (k < n_params) params[k] -= lr * grad[k] * coef[0];
}

// Target network update: target <- (1 - tau) * target + tau * online (tau = 1: hard copy).
__kernel void polyak(__global float* target, __global const float* online, long n_params, float tau) {
    long k = get_global_id(0);
    if (k < n_params) target[k] = tau >= 1.0f ? online[k] : target[k] + tau * (online[k] - target[k]);
}
