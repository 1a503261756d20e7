// Test helper: trained-codec interchange files (codec/dckv/dckv_trained.h) built from
// a closed-form artifact: its own transform as the trainer would write it, metadata
// naming the base artifact, and random nets.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_trained.h"
#include "kvstash/prefix_key.h"
#include "kvstash/sha256.h"
#include "tests/codec/dckv/safetensors_writer.h"

namespace kvstash::dckv::testing {

using Tensors = std::map<std::string, TestTensor>;

// The trained-file tensors of an artifact's transform: W_e = basis scaled by the encode
// scale (y_i = <basis_i, e (x - m)> = <basis_i e, x - m>), W_d = basis.
inline Tensors TransformTensors(const DckvArtifact& a) {
  Tensors t;
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const DckvGroup& g = a.groups[gi];
    const std::string p = "group." + std::to_string(gi) + ".";
    const uint64_t na = g.n_active(), d = g.dims;
    std::vector<float> enc = g.basis;
    if (!g.encode_scale.empty()) {
      for (uint64_t i = 0; i < na; ++i)
        for (uint64_t c = 0; c < d; ++c) enc[i * d + c] *= g.encode_scale[c];
    }
    t[p + "mean"] = {{d}, g.mean};
    t[p + "encoder"] = {{na, d}, enc};
    t[p + "decoder"] = {{na, d}, g.basis};
    t[p + "step"] = {{na}, g.step};
    t[p + "scale"] = {{na}, std::vector<float>(na, 1.0f)};
  }
  return t;
}

inline std::map<std::string, std::string> Metadata(const std::vector<uint8_t>& base) {
  return {{"format", kTrainedDckvFormat},
          {"base_artifact_sha256", ToHex(Sha256(base))},
          {"lambda", "0.1"},
          {"seed", "1"},
          {"steps", "100"},
          {"model", "synthetic"},
          {"threshold", "0.3"}};
}

inline void AddNet(Tensors* t, const std::string& prefix, uint64_t hidden, uint64_t in, uint64_t out,
                   float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto fill = [&](uint64_t n, float s) {
    std::vector<float> v(n);
    for (float& x : v) x = n01(rng) * s;
    return v;
  };
  (*t)[prefix + ".w1"] = {{hidden, in}, fill(hidden * in, 0.3f)};
  (*t)[prefix + ".b1"] = {{hidden}, fill(hidden, 0.3f)};
  (*t)[prefix + ".w2"] = {{out, hidden}, fill(out * hidden, scale)};
  (*t)[prefix + ".b2"] = {{out}, fill(out, scale)};
}

}  // namespace kvstash::dckv::testing
