// Which hand-written SIMD code paths a process may take: the KVSTASH_CPU_PATH
// environment variable, read once (docs/determinism.md).
//
//   unset, "" or "auto"  every path the CPU supports (the default)
//   "scalar"             behave as a CPU without AVX2: kAuto backends (spec GEMM and
//                        predictor, rANS decoder, dckv synthesis) resolve to the portable
//                        code, and an explicit AVX2 request is NotSupported as it would be
//                        on such a CPU
//   "avx2"               the same as "auto" on this code base (AVX2 is the widest
//                        hand-written path; there is no AVX-512 kernel)
// Any other value is treated as "scalar" and reported once on stderr, so a typo never
// silently runs the fast path in a determinism check.
//
// The variable only selects among paths whose outputs are bit-identical by design
// (DESIGN.md §3); the determinism checks (tests/determinism/) use it to force each one.
// Thread-safety: thread-safe (the value is read once, on first use).
#pragma once

namespace kvstash {

// False when KVSTASH_CPU_PATH forbids AVX2 code ("scalar" or an unknown value).
bool CpuPathAllowsAvx2();

// The resolved setting, "auto" or "scalar", for reports.
const char* CpuPathName();

}  // namespace kvstash
