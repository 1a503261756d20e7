#include "common/cpu_path.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvstash {
namespace {

enum class Level { kScalar, kAvx2, kAvx512, kAuto };

Level ReadLevel() {
  const char* v = std::getenv("KVSTASH_CPU_PATH");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return Level::kAuto;
  if (std::strcmp(v, "avx2") == 0) return Level::kAvx2;
  if (std::strcmp(v, "avx512") == 0) return Level::kAvx512;
  if (std::strcmp(v, "scalar") != 0) {
    std::fprintf(stderr, "kvstash: unknown KVSTASH_CPU_PATH=%s (auto, avx512, avx2, scalar): using scalar\n", v);
  }
  return Level::kScalar;
}

Level CachedLevel() {
  static const Level level = ReadLevel();
  return level;
}

}  // namespace

bool CpuPathAllowsAvx2() { return CachedLevel() != Level::kScalar; }

bool CpuPathAllowsAvx512() { return CachedLevel() == Level::kAuto || CachedLevel() == Level::kAvx512; }

bool CpuPathAllowsAmx() { return CachedLevel() == Level::kAuto; }

bool CpuMayUseAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") && CpuPathAllowsAvx2();
  return has;
#else
  return false;
#endif
}

bool CpuMayUseAvx512() {
#if defined(__x86_64__)
  static const bool has = CpuMayUseAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          CpuPathAllowsAvx512();
  return has;
#else
  return false;
#endif
}

bool CpuMayUseAvx512Vnni() {
#if defined(__x86_64__)
  static const bool has = CpuMayUseAvx512() && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

const char* CpuPathName() {
  switch (CachedLevel()) {
    case Level::kAuto: return "auto";
    case Level::kAvx512: return "avx512";
    case Level::kAvx2: return "avx2";
    case Level::kScalar: return "scalar";
  }
  return "scalar";
}

}  // namespace kvstash
