#include "codec/dckv/dckv_axpy.h"

#include "codec/dckv/dckv_synthesis.h"

namespace kvstash::dckv {

void Axpy(float u, const float* x, float* acc, uint32_t n) {
#if defined(__x86_64__)
  if (SynthesisHasAvx2()) return internal::AxpyAvx2(u, x, acc, n);
#endif
  for (uint32_t i = 0; i < n; ++i) acc[i] += u * x[i];
}

}  // namespace kvstash::dckv
