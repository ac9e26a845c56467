// Pieces the native learner steps share: the caller's cblas_sgemm, input checks that raise
// ValueError before anything is written, and torch's Adam rule.
//
// Used by csrc/dqn_mlp.cpp (DQN) and csrc/ac_mlp.cpp (TD3/DDPG and SAC).

#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace pearl_native {

namespace py = pybind11;

// CBLAS constants (the same numbers in every CBLAS).
constexpr int kRowMajor = 101;
constexpr int kNoTrans = 111;
constexpr int kTrans = 112;

using Sgemm64 = void (*)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                         int64_t, float, float*, int64_t);
using Sgemm32 = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);

// C (M x N) = op(A) op(B) (+ beta C), row-major, through the caller's cblas_sgemm.
struct Gemm {
  uintptr_t fn = 0;
  bool ilp64 = true;
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) const {
    const int a = ta ? kTrans : kNoTrans, b = tb ? kTrans : kNoTrans;
    if (ilp64) {
      reinterpret_cast<Sgemm64>(fn)(kRowMajor, a, b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    } else {
      reinterpret_cast<Sgemm32>(fn)(kRowMajor, a, b, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                    1.0f, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                                    static_cast<int>(ldc));
    }
  }
};

using F32 = py::array_t<float, py::array::c_style>;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__) && defined(__GLIBC__)
#define PEARL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PEARL_VECTOR_CLONES
#endif

// Raises ValueError("<who>: <msg>").
[[noreturn]] inline void fail(const std::string& who, const std::string& msg) {
  throw py::value_error(who + ": " + msg);
}

inline std::string shape_str(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

inline std::string shape_str(const py::array& a) {
  std::vector<py::ssize_t> s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(a.shape(i));
  return shape_str(s);
}

// `obj` as a C-contiguous numpy array of T of exactly `shape`, or ValueError naming `what`.
template <typename T>
py::array_t<T, py::array::c_style> checked(const std::string& who, const py::handle& obj,
                                          const std::vector<py::ssize_t>& shape, const std::string& what) {
  if (!py::isinstance<py::array>(obj)) fail(who, what + " is not a numpy array");
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!arr.dtype().is(py::dtype::of<T>()))
    fail(who, what + " must be " + std::string(py::str(py::dtype::of<T>())) + "; found " +
                  std::string(py::str(arr.dtype())));
  if (!(arr.flags() & py::array::c_style)) fail(who, what + " must be C-contiguous");
  bool same = static_cast<size_t>(arr.ndim()) == shape.size();
  for (size_t i = 0; same && i < shape.size(); ++i) same = arr.shape(i) == shape[i];
  if (!same) fail(who, what + " has shape " + shape_str(arr) + "; expected " + shape_str(shape));
  return py::reinterpret_borrow<py::array_t<T, py::array::c_style>>(arr);
}

// A float32 array the kernel keeps and writes into (held, not copied).
inline F32 held(const std::string& who, const py::handle& obj, const std::vector<py::ssize_t>& shape,
                const std::string& what) {
  if (!py::isinstance<py::array>(obj)) fail(who, what + " is not a numpy array");
  if (!py::reinterpret_borrow<py::array>(obj).writeable()) fail(who, what + " must be writeable");
  return checked<float>(who, obj, shape, what);
}

// torch's Adam, as its fused CPU kernel computes it: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Like torch, 1 - b1 and 1 - b2 are
// computed in double and then rounded (1.0f - 0.999f is 1.3e-5 away from float(1 - 0.999)). Torch's
// vectorised loop also fuses multiply-adds (FMA); this one does not: the results differ in the last
// bit, not in the rule.
PEARL_VECTOR_CLONES inline void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m,
                                          float* __restrict v, int64_t n, float step_size, float bc2_sqrt, float b1,
                                          float b2, float c1, float c2, float eps) {
  for (int64_t e = 0; e < n; ++e) {
    const float gr = g[e];
    const float me = b1 * m[e] + c1 * gr;
    const float ve = b2 * v[e] + c2 * gr * gr;
    m[e] = me;
    v[e] = ve;
    p[e] -= step_size * me / (std::sqrt(ve) / bc2_sqrt + eps);
  }
}

inline void adam(float* p, const float* g, float* m, float* v, int64_t n, float step, double lr, double b1, double b2,
                 double eps) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  adam_loop(p, g, m, v, n, static_cast<float>(lr / bc1), static_cast<float>(std::sqrt(bc2)), static_cast<float>(b1),
            static_cast<float>(b2), static_cast<float>(1.0 - b1), static_cast<float>(1.0 - b2),
            static_cast<float>(eps));
}

// The scale torch.nn.utils.clip_grad_norm_ applies to `n` gradients (1 when no clipping is due):
// max_norm / (norm + 1e-6) when that is < 1. The sum of squares in double, eight partial sums.
inline float clip_coef(const float* g, size_t n, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t n8 = n - n % 8;
  for (size_t e = 0; e < n8; e += 8)
    for (size_t j = 0; j < 8; ++j) part[j] += static_cast<double>(g[e + j]) * g[e + j];
  double ss = 0.0;
  for (size_t e = n8; e < n; ++e) ss += static_cast<double>(g[e]) * g[e];
  for (double p : part) ss += p;
  const double coef = max_norm / (std::sqrt(ss) + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

// Adam hyper-parameters of one optimizer, checked.
struct AdamHP {
  double lr = 0, b1 = 0, b2 = 0, eps = 0;
};

inline AdamHP adam_hp(const std::string& who, const py::handle& obj, const std::string& what) {
  AdamHP h;
  try {
    auto t = obj.cast<py::sequence>();
    if (t.size() != 4) fail(who, what + " must be (lr, beta1, beta2, eps)");
    h.lr = t[0].cast<double>();
    h.b1 = t[1].cast<double>();
    h.b2 = t[2].cast<double>();
    h.eps = t[3].cast<double>();
  } catch (const py::cast_error&) {
    fail(who, what + " must be (lr, beta1, beta2, eps), four numbers");
  }
  if (!(h.lr > 0.0 && std::isfinite(h.lr))) fail(who, what + " lr must be a finite number > 0");
  if (!(h.b1 >= 0.0 && h.b1 < 1.0) || !(h.b2 >= 0.0 && h.b2 < 1.0)) fail(who, what + " betas must be in [0, 1)");
  if (!(h.eps >= 0.0 && std::isfinite(h.eps))) fail(who, what + " eps must be a finite number >= 0");
  return h;
}

}  // namespace pearl_native
