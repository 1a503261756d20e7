#include "numerics/int8_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

#include <algorithm>
#include <string>
#include <vector>

#include "common/cpu_path.h"
#include "kvstash/result.h"
#include "numerics/det_math.h"
#include "numerics/parallel_for.h"

namespace kvstash::spec {
namespace {

// Dot product of two int8 vectors of length k (portable reference).
template <typename TA>
int32_t DotScalar(const TA* a, const int8_t* b, int k) {
  int32_t s = 0;
  for (int i = 0; i < k; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
  return s;
}

#if defined(__x86_64__)  // the AVX2 kernels (no other ISA has a SIMD path yet)
__attribute__((target("avx2"))) inline int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

__attribute__((target("avx2"))) inline __m256i LoadWiden(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2"))) inline __m256i LoadWiden(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Four dot products of one A row with four B rows, 16 channels per step.
template <typename TA>
__attribute__((target("avx2"))) void Dot4Avx2(const TA* a, const int8_t* b0, const int8_t* b1,
                                              const int8_t* b2, const int8_t* b3, int k, int32_t* out) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m256i va = LoadWiden(a + i);
    acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(va, LoadWiden(b0 + i)));
    acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(va, LoadWiden(b1 + i)));
    acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(va, LoadWiden(b2 + i)));
    acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(va, LoadWiden(b3 + i)));
  }
  out[0] = HorizontalSum(acc0) + DotScalar(a + i, b0 + i, k - i);
  out[1] = HorizontalSum(acc1) + DotScalar(a + i, b1 + i, k - i);
  out[2] = HorizontalSum(acc2) + DotScalar(a + i, b2 + i, k - i);
  out[3] = HorizontalSum(acc3) + DotScalar(a + i, b3 + i, k - i);
}

template <typename TA>
__attribute__((target("avx2"))) int32_t DotAvx2(const TA* a, const int8_t* b, int k) {
  __m256i acc = _mm256_setzero_si256();
  int i = 0;
  for (; i + 16 <= k; i += 16) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(LoadWiden(a + i), LoadWiden(b + i)));
  }
  return HorizontalSum(acc) + DotScalar(a + i, b + i, k - i);
}

#endif  // __x86_64__

// Dot products of row a (length len) with rows b[j*ldb] for j in [0, n); out[j].
template <typename TA>
void DotRow(const TA* a, const int8_t* b, int ldb, int n, int len, bool avx2, int32_t* out) {
  int j = 0;
#if defined(__x86_64__)
  if (avx2) {
    for (; j + 4 <= n; j += 4) {
      const int8_t* p = b + static_cast<size_t>(j) * ldb;
      Dot4Avx2(a, p, p + ldb, p + 2 * static_cast<size_t>(ldb), p + 3 * static_cast<size_t>(ldb), len,
               out + j);
    }
    for (; j < n; ++j) out[j] = DotAvx2(a, b + static_cast<size_t>(j) * ldb, len);
    return;
  }
#else
  (void)avx2;  // false: CpuHasAvx2() is false off x86-64
#endif
  for (; j < n; ++j) out[j] = DotScalar(a, b + static_cast<size_t>(j) * ldb, len);
}

Status CheckShapes(size_t a, size_t b, size_t c, int m, int n, int k) {
  if (m < 0 || n < 0 || k < 0) return Status::InvalidArgument("GEMM dims must be >= 0");
  if (k > (1 << 17)) return Status::InvalidArgument("GEMM K above 2^17 could overflow int32");
  if (a != static_cast<size_t>(m) * k || b != static_cast<size_t>(n) * k || c != static_cast<size_t>(m) * n) {
    return Status::InvalidArgument("GEMM span sizes do not match M=" + std::to_string(m) +
                                   " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  return Status::Ok();
}

}  // namespace

bool CpuHasAvx2() { return CpuMayUseAvx2(); }

bool CpuHasAvx512() { return CpuMayUseAvx512Vnni(); }

bool CpuHasAmx() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool has = [] {
    if (!CpuHasAvx512() || !CpuPathAllowsAmx()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) != 3) return false;  // XCR0: XTILECFG and XTILEDATA enabled
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace {

// NotSupported when `backend` forces a path this CPU (or KVSTASH_CPU_PATH) does not allow.
Status CheckForcedBackend(GemmBackend backend) {
  if (backend == GemmBackend::kAvx2 && !CpuHasAvx2()) {
    return Status::NotSupported("AVX2 GEMM requested on a CPU without AVX2");
  }
  if (backend == GemmBackend::kAvx512 && !CpuHasAvx512()) {
    return Status::NotSupported("AVX-512 GEMM requested on a CPU without AVX-512");
  }
  if (backend == GemmBackend::kAmx && !CpuHasAmx()) {
    return Status::NotSupported("AMX GEMM requested on a CPU without AMX");
  }
  return Status::Ok();
}

}  // namespace

// A forced backend implies every narrower path (kAmx runs AVX-512 and AVX2 code too).
Result<bool> UseAvx2(GemmBackend backend) {
  KVSTASH_RETURN_IF_ERROR(CheckForcedBackend(backend));
  return backend == GemmBackend::kAuto ? CpuHasAvx2() : backend != GemmBackend::kScalar;
}

Result<bool> UseAvx512(GemmBackend backend) {
  KVSTASH_RETURN_IF_ERROR(CheckForcedBackend(backend));
  return backend == GemmBackend::kAuto ? CpuHasAvx512()
                                       : backend == GemmBackend::kAvx512 || backend == GemmBackend::kAmx;
}

Result<bool> UseAmx(GemmBackend backend) {
  KVSTASH_RETURN_IF_ERROR(CheckForcedBackend(backend));
  return backend == GemmBackend::kAuto ? CpuHasAmx() : backend == GemmBackend::kAmx;
}

Status Int8GemmNT(std::span<const int8_t> a, std::span<const int8_t> b, std::span<int32_t> c, int m, int n,
                  int k, GemmBackend backend, int threads) {
  KVSTASH_RETURN_IF_ERROR(CheckShapes(a.size(), b.size(), c.size(), m, n, k));
  auto avx2 = UseAvx2(backend);
  if (!avx2.ok()) return avx2.status();
  numerics::ParallelRanges(m, threads, [&, use = *avx2](int begin, int end) {
    for (int i = begin; i < end; ++i) {
      DotRow(a.data() + static_cast<size_t>(i) * k, b.data(), k, n, k, use,
             c.data() + static_cast<size_t>(i) * n);
    }
  });
  return Status::Ok();
}

namespace {

template <typename TA>
Status GroupedNT(std::span<const TA> a, std::span<const float> a_scale, std::span<const int8_t> b,
                 std::span<const float> b_scale, std::span<float> out, int m, int n, int k, int group,
                 GemmBackend backend, int threads) {
  KVSTASH_RETURN_IF_ERROR(CheckShapes(a.size(), b.size(), out.size(), m, n, k));
  if (group < 1) return Status::InvalidArgument("GEMM group size must be >= 1");
  if (sizeof(TA) == 2 && group > kMaxInt16Group) {
    return Status::InvalidArgument("int16 x int8 GEMM group above 512 could overflow int32");
  }
  const int groups = (k + group - 1) / group;
  if (a_scale.size() != static_cast<size_t>(m) * groups ||
      b_scale.size() != static_cast<size_t>(n) * groups) {
    return Status::InvalidArgument("GEMM scale spans must be M*groups and N*groups");
  }
  auto avx2 = UseAvx2(backend);
  if (!avx2.ok()) return avx2.status();
  numerics::ParallelRanges(m, threads, [&, use = *avx2](int begin, int end) {
    std::vector<int32_t> dots(n);
    for (int i = begin; i < end; ++i) {
      float* o = out.data() + static_cast<size_t>(i) * n;
      std::fill(o, o + n, 0.0f);
      for (int g = 0; g < groups; ++g) {
        const int k0 = g * group, len = std::min(group, k - k0);
        DotRow(a.data() + static_cast<size_t>(i) * k + k0, b.data() + k0, k, n, len, use, dots.data());
        const float sa = a_scale[static_cast<size_t>(i) * groups + g];
        for (int j = 0; j < n; ++j) {
          const float s = DMul(sa, b_scale[static_cast<size_t>(j) * groups + g]);
          o[j] = DAdd(o[j], DMul(static_cast<float>(dots[j]), s));
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace

Status Int8GemmGroupedNT(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const int8_t> b,
                         std::span<const float> b_scale, std::span<float> out, int m, int n, int k, int group,
                         GemmBackend backend, int threads) {
  return GroupedNT<int8_t>(a, a_scale, b, b_scale, out, m, n, k, group, backend, threads);
}

Status Int16x8GemmGroupedNT(std::span<const int16_t> a, std::span<const float> a_scale,
                            std::span<const int8_t> b, std::span<const float> b_scale, std::span<float> out,
                            int m, int n, int k, int group, GemmBackend backend, int threads) {
  return GroupedNT<int16_t>(a, a_scale, b, b_scale, out, m, n, k, group, backend, threads);
}

}  // namespace kvstash::spec
