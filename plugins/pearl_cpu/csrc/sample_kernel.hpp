// The sample() descent, compiled once per instruction set.
//
// This header is included by sumtree.cpp (baseline x86-64 = SSE2, or whatever
// the compiler targets elsewhere) and by sample_avx2.cpp (built with -mavx2);
// sumtree.cpp picks one at run time. Each inclusion must define
// PEARL_KERNEL_NS to a distinct name. Everything below has internal linkage and
// uses no std:: or Layout member functions, so no out-of-line copy of shared
// inline code built for AVX2 can leak into the baseline path at link time.
//
// Results do not depend on the instruction set: sample() forms no sums, it
// only compares the mass with stored prefixes, which is exact.

#ifndef PEARL_KERNEL_NS
#error "define PEARL_KERNEL_NS before including sample_kernel.hpp"
#endif

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "sumtree.hpp"

namespace pearl_cpu {
namespace PEARL_KERNEL_NS {

using SampleFn = void (*)(const Layout&, const double*, int64_t*, size_t);

// The kernel for groups of S slots (0: S known only at run time).
SampleFn sample_kernel_for(uint32_t S);

namespace {

// Number of prefixes <= r, i.e. (prefixes never decrease) the index of the
// first child whose inclusive prefix exceeds r; S when none does. P is
// 16-byte aligned (32-byte aligned when S >= 4).
template <int SC>
inline uint32_t select_child(const double* P, uint32_t S, double r) {
#if defined(__AVX2__)
  if (S >= 4) {
    const __m256d rv = _mm256_set1_pd(r);
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    uint32_t j = 0;
    for (; j + 8 <= S; j += 8) {  // a mask lane is -1 where P <= r
      acc0 = _mm256_sub_epi64(acc0, _mm256_castpd_si256(_mm256_cmp_pd(_mm256_load_pd(P + j), rv, _CMP_LE_OQ)));
      acc1 = _mm256_sub_epi64(acc1,
                              _mm256_castpd_si256(_mm256_cmp_pd(_mm256_load_pd(P + j + 4), rv, _CMP_LE_OQ)));
    }
    if (j < S)
      acc0 = _mm256_sub_epi64(acc0, _mm256_castpd_si256(_mm256_cmp_pd(_mm256_load_pd(P + j), rv, _CMP_LE_OQ)));
    acc0 = _mm256_add_epi64(acc0, acc1);
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(acc0), _mm256_extracti128_si256(acc0, 1));
    return static_cast<uint32_t>(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1));
  }
#endif
#if defined(__SSE2__)
  const __m128d rv = _mm_set1_pd(r);
  __m128i acc0 = _mm_setzero_si128(), acc1 = _mm_setzero_si128();
  uint32_t j = 0;
  for (; j + 4 <= S; j += 4) {
    acc0 = _mm_sub_epi64(acc0, _mm_castpd_si128(_mm_cmple_pd(_mm_load_pd(P + j), rv)));
    acc1 = _mm_sub_epi64(acc1, _mm_castpd_si128(_mm_cmple_pd(_mm_load_pd(P + j + 2), rv)));
  }
  if (j < S) acc0 = _mm_sub_epi64(acc0, _mm_castpd_si128(_mm_cmple_pd(_mm_load_pd(P + j), rv)));
  acc0 = _mm_add_epi64(acc0, acc1);
  return static_cast<uint32_t>(_mm_cvtsi128_si64(acc0) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc0, acc0)));
#else
  uint32_t cnt = 0;
  for (uint32_t j = 0; j < S; ++j) cnt += P[j] <= r;
  return cnt;
#endif
}

// Last slot with a non-zero value, or 0 if the whole group is zero (only
// possible if a caller broke the lock discipline; slot 0 is always a real
// node on any path reached from a positive parent).
inline uint32_t last_nonzero_child(const double* v, uint32_t S) {
  for (uint32_t j = S; j-- > 0;)
    if (v[j] != 0.0) return j;
  return 0;
}

// Queries are processed in blocks of B, level by level: the B group loads of
// one level are independent, and the child group of each query is prefetched
// as soon as it is known, B-1 queries before it is read. Child selection is
// branch-free compares against the stored prefixes.
template <int SC>
void sample_kernel(const Layout& L, const double* x, int64_t* out, size_t n) {
  constexpr int B = 32;
  const uint32_t S = SC ? static_cast<uint32_t>(SC) : L.S;
  const uint32_t lines = (S * 8 + 63) / 64;  // cache lines of a group's prefixes
  const int D = L.D;
  const uint64_t F = L.F;
  const uint64_t last = L.cap - 1;
  const double inf = __builtin_inf();
  for (size_t base = 0; base < n; base += B) {
    const int m = static_cast<int>(n - base < B ? n - base : B);
    double r[B];
    uint64_t g[B];
    for (int q = 0; q < m; ++q) {
      r[q] = x[base + q];
      g[q] = 0;
    }
    for (int d = 1; d <= D; ++d) {
      const double* raw = L.data + L.off[d];
      const double* pre = L.pre + L.off[d];
      const bool pf = d < D;
      const double* next = L.pre + L.off[pf ? d + 1 : d];
      for (int q = 0; q < m; ++q) {
        const double* P = pre + g[q] * S;
        const double rr = r[q];
        uint32_t cnt = select_child<SC>(P, S, rr);
        double before;
        if (__builtin_expect(cnt == S, 0)) {
          // Drift: rr is at or past this node's sum. Take the last non-zero
          // child and stay on the right edge all the way down (residual
          // +inf), so the result is the last non-zero leaf below this node.
          cnt = last_nonzero_child(raw + g[q] * S, S);
          before = -inf;
        } else {
          // before = cnt ? P[cnt - 1] : 0.0, without a (badly predicted) branch
          const uint64_t keep = uint64_t{0} - (cnt != 0);
          const double b = P[cnt - (cnt != 0)];
          uint64_t bits;
          std::memcpy(&bits, &b, sizeof bits);
          bits &= keep;
          std::memcpy(&before, &bits, sizeof bits);
        }
        r[q] = rr - before;
        const uint64_t child = g[q] * F + cnt;
        g[q] = child;
        if (pf) {
          const double* c = next + child * S;
          for (uint32_t l = 0; l < lines; ++l) __builtin_prefetch(c + 8 * l, 0, 3);
        }
      }
    }
    for (int q = 0; q < m; ++q) out[base + q] = static_cast<int64_t>(g[q] < last ? g[q] : last);
  }
}

}  // namespace

SampleFn sample_kernel_for(uint32_t S) {
  switch (S) {
    case 2: return &sample_kernel<2>;
    case 4: return &sample_kernel<4>;
    case 8: return &sample_kernel<8>;
    case 16: return &sample_kernel<16>;
    case 24: return &sample_kernel<24>;
    case 32: return &sample_kernel<32>;
    case 40: return &sample_kernel<40>;
    case 48: return &sample_kernel<48>;
    case 56: return &sample_kernel<56>;
    case 64: return &sample_kernel<64>;
    default: return &sample_kernel<0>;
  }
}

}  // namespace PEARL_KERNEL_NS
}  // namespace pearl_cpu
