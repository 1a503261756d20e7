#include "codec/dckv/dckv_gelu.h"

namespace kvstash::dckv {

void GeluInPlace(std::span<float> values) {
  for (float& v : values) v = Gelu(v);
}

}  // namespace kvstash::dckv
