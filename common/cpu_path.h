// Which hand-written SIMD code paths a process may take: what the CPU supports (cpuid,
// checked once) as far as the KVSTASH_CPU_PATH environment variable, read once, allows
// (docs/determinism.md).
//
//   unset, "" or "auto"  every path the CPU supports (the default): AMX tiles and
//                        AVX-512 kernels where the CPU has the extensions they need,
//                        else AVX2
//   "avx512"             AVX-512 at most: behave as a CPU without AMX (an AMD Zen 4)
//   "avx2"               AVX2 at most: behave as a CPU without AVX-512 (an AMD Zen 3):
//                        kAuto backends take their AVX2 code, and an explicit AVX-512
//                        request is NotSupported as it would be on such a CPU
//   "scalar"             behave as a CPU without AVX2: kAuto backends (spec GEMM and
//                        predictor, rANS decoder, dckv synthesis and centre prediction)
//                        resolve to the portable code, and an explicit AVX2 or AVX-512
//                        request is NotSupported
// Any other value is treated as "scalar" and reported once on stderr, so a typo never
// silently runs the fast path in a determinism check.
//
// The variable only selects among paths whose outputs are bit-identical by design
// (docs/architecture.md §3); the determinism checks (tests/determinism/) use it to force each one.
// Thread-safety: thread-safe (the value is read once, on first use).
#pragma once

namespace kvstash {

// False when KVSTASH_CPU_PATH forbids AVX2 code ("scalar" or an unknown value).
bool CpuPathAllowsAvx2();

// False when KVSTASH_CPU_PATH forbids AVX-512 code ("avx2", "scalar" or an unknown
// value).
bool CpuPathAllowsAvx512();

// False when KVSTASH_CPU_PATH forbids AMX tile code (anything but "auto").
bool CpuPathAllowsAmx();

// True when the CPU has AVX2 and BMI2 and KVSTASH_CPU_PATH allows AVX2: the condition
// of every AVX2 kernel (rANS decode, spec GEMM and contexts, dckv synthesis and centre
// prediction, predictor).
bool CpuMayUseAvx2();

// True when CpuMayUseAvx2(), the CPU has AVX-512 F, BW, DQ and VL (with the operating
// system's zmm state, as the compiler's cpu check tests it) and KVSTASH_CPU_PATH
// allows AVX-512.
bool CpuMayUseAvx512();

// True when CpuMayUseAvx512() and the CPU also has AVX-512 VNNI (Intel Ice Lake and
// later, AMD Zen 4): the int8 GEMM kernels' condition.
bool CpuMayUseAvx512Vnni();

// The resolved setting, "auto", "avx512", "avx2" or "scalar", for reports.
const char* CpuPathName();

}  // namespace kvstash
