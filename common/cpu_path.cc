#include "common/cpu_path.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvstash {
namespace {

bool ReadAllowsAvx2() {
  const char* v = std::getenv("KVSTASH_CPU_PATH");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0 || std::strcmp(v, "avx2") == 0) {
    return true;
  }
  if (std::strcmp(v, "scalar") != 0) {
    std::fprintf(stderr, "kvstash: unknown KVSTASH_CPU_PATH=%s (auto, avx2, scalar): using scalar\n", v);
  }
  return false;
}

}  // namespace

bool CpuPathAllowsAvx2() {
  static const bool allows = ReadAllowsAvx2();
  return allows;
}

const char* CpuPathName() { return CpuPathAllowsAvx2() ? "auto" : "scalar"; }

}  // namespace kvstash
