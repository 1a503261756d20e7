// Exact int8 matrix products for the spec predictor (docs/architecture.md §3).
//
//   C[m][n] = sum_k A[m][k] * B[n][k]        A: int8 [M, K] row-major (activations)
//                                            B: int8 [N, K] row-major (weights, one row
//                                               per output channel: "NT" layout)
//                                            C: int32 [M, N] row-major
//
// READ ME FIRST
// - Integer accumulation is exact in any order, so every backend (portable scalar,
//   AVX2, CUDA IMMA, any thread count or blocking) produces the same bits. REQUIRES
//   K <= 2^17 so that |sum| <= 127*128*K cannot overflow int32 (InvalidArgument
//   otherwise).
// - The AVX2 path sign-extends to int16 and uses vpmaddwd (products of two int16
//   summed into int32: |2*128*128| < 2^31, exact). It deliberately avoids vpmaddubsw,
//   whose int16 pair sums saturate.
// - Grouped variant: K is split into groups of G channels (G = 128: the block size of
//   published FP8 checkpoints); each group's int32 dot product is scaled by
//   a_scale[m][g] * b_scale[n][g] and added into an fp32 sum in ascending g order, so
//   the fp32 result is deterministic too.
//
// Thread-safety: functions are reentrant; `threads` > 1 splits rows of C over
// std::threads (each element is computed by one thread, so results do not depend on
// the split).
#pragma once

#include <cstdint>
#include <span>

#include "kvstash/result.h"
#include "kvstash/status.h"

namespace kvstash::spec {

// kAuto: the widest path this CPU (and KVSTASH_CPU_PATH) allows. kAvx2: AVX2 code
// only, never AVX-512. kAvx512: the AVX-512 kernels where one exists (the packed GEMM,
// the predictor's attention and exp/SiLU), AVX2 code elsewhere; never AMX. kAmx: as
// kAvx512, but the packed GEMM on AMX tiles where its operands carry the tile layout
// (numerics/int8_gemm_packed.h). Every backend gives the same bits.
enum class GemmBackend { kAuto, kScalar, kAvx2, kAvx512, kAmx };

// True when this CPU supports AVX2 and BMI2 (checked once with cpuid) and
// KVSTASH_CPU_PATH allows it (common/cpu_path.h, CpuMayUseAvx2: "scalar" makes this
// false).
bool CpuHasAvx2();

// True when this CPU supports AVX2 and AVX-512 F, BW, DQ, VL and VNNI (Intel Ice Lake /
// Sapphire Rapids, AMD Zen 4; cpuid, including the OS's zmm state support) and
// KVSTASH_CPU_PATH allows AVX-512 ("avx2" and "scalar" make this false);
// common/cpu_path.h's CpuMayUseAvx512Vnni.
bool CpuHasAvx512();

// True when CpuHasAvx512() and the CPU has AMX-TILE and AMX-INT8 (Intel Sapphire
// Rapids and later; cpuid and XCR0), Linux granted this process the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM, requested once here) and KVSTASH_CPU_PATH allows
// AMX (only "auto" does).
bool CpuHasAmx();

// Whether `backend` runs AVX2 code here: kScalar false, kAuto CpuHasAvx2(), kAvx2
// true or NotSupported on a CPU without AVX2, kAvx512 / kAmx true or NotSupported on a
// CPU without AVX-512 / AMX.
Result<bool> UseAvx2(GemmBackend backend);

// Whether `backend` runs the AVX-512 kernels here: kScalar and kAvx2 false, kAuto
// CpuHasAvx512(), kAvx512 / kAmx true or NotSupported on a CPU without AVX-512 / AMX.
Result<bool> UseAvx512(GemmBackend backend);

// Whether `backend` runs AMX tile code here: kAuto CpuHasAmx(), kAmx true or
// NotSupported on a CPU without AMX, the others false.
Result<bool> UseAmx(GemmBackend backend);

// C = A * B^T in int32. REQUIRES: spans sized M*K, N*K, M*N (InvalidArgument
// otherwise); backend kAvx2 on a CPU without AVX2 is NotSupported.
Status Int8GemmNT(std::span<const int8_t> a, std::span<const int8_t> b, std::span<int32_t> c, int m, int n,
                  int k, GemmBackend backend = GemmBackend::kAuto, int threads = 1);

// out[m][n] = sum over groups g (ascending) of float(dot_g(A[m], B[n])) *
//             (a_scale[m*groups + g] * b_scale[n*groups + g]), groups = ceil(K / G).
// REQUIRES: G >= 1, scale spans sized M*groups and N*groups.
Status Int8GemmGroupedNT(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const int8_t> b,
                         std::span<const float> b_scale, std::span<float> out, int m, int n, int k, int group,
                         GemmBackend backend = GemmBackend::kAuto, int threads = 1);

// Largest group of the int16 x int8 product: 512 * 32767 * 128 < 2^31, so each group's
// int32 dot product is exact.
inline constexpr int kMaxInt16Group = 512;

// As Int8GemmGroupedNT with int16 activations (W8A16: 256x finer activation steps).
// REQUIRES: 1 <= group <= kMaxInt16Group (InvalidArgument otherwise).
Status Int16x8GemmGroupedNT(std::span<const int16_t> a, std::span<const float> a_scale,
                            std::span<const int8_t> b, std::span<const float> b_scale, std::span<float> out,
                            int m, int n, int k, int group, GemmBackend backend = GemmBackend::kAuto,
                            int threads = 1);

}  // namespace kvstash::spec
