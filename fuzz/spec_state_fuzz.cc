// Fuzzes spec state coding's two parsers of untrusted bytes
// (codec/spec/spec_state_artifact.h, codec/spec/spec_state_codec.h).
// First input byte even: the rest is a state artifact without its XXH3-64 trailer,
// which the fuzzer appends so that the field checks are reached. Odd: the rest is a
// coded state body, decoded against a fixed prediction and a fixed calibrated
// artifact; the fuzzer writes the right artifact digest and prediction checksum into
// the header (when long enough) so that the rANS and raw-bit sections are reached.
// Any input must give a Status or a state (a well-formed body of another state, with
// that state's checksum, is a valid input), never a crash, an out-of-bounds access or
// an unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "common/byte_io.h"
#include "common/checksum.h"

namespace {

using namespace kvstash;

StateTensor Tensor(const char* name, std::vector<uint64_t> shape, uint32_t seed) {
  StateTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  t.data.resize(4 * n);
  uint32_t x = seed;
  for (uint64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;  // LCG: a fixed, varied set of bit patterns
    const float v = static_cast<float>(static_cast<int32_t>(x >> 8) % 2001 - 1000) / 256.0f;
    StoreLe<uint32_t>(t.data.data() + 4 * i, Bits(v));
  }
  return t;
}

struct Fixture {
  RecurrentState exact, pred;
  std::vector<uint8_t> artifact_bytes;
  Fixture() {
    exact.tensors = {Tensor("layers.0.wkv_state", {2, 4, 4}, 1), Tensor("layers.0.att_shift", {5}, 2)};
    pred.tensors = {Tensor("layers.0.wkv_state", {2, 4, 4}, 3), Tensor("layers.0.att_shift", {5}, 4)};
    const spec::StateCalibrationPair p{&exact, &pred};
    artifact_bytes = spec::CalibrateSpecState(std::span(&p, 1)).value().Serialize();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  static const spec::SpecStateArtifact artifact =
      spec::SpecStateArtifact::Parse(fx.artifact_bytes).value();
  if (size == 0) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) == 0) {
    ByteWriter(&bytes).U64(Xxh3_64(std::span<const uint8_t>(data + 1, size - 1)));
    auto a = spec::SpecStateArtifact::Parse(bytes);
    if (a.ok()) (void)a->Serialize();
    return 0;
  }
  if (bytes.size() >= 24) {
    StoreLe<uint64_t>(bytes.data() + 8, artifact.digest());
    StoreLe<uint64_t>(bytes.data() + 16, fx.pred.ContentChecksum());
  }
  (void)spec::DecodeSpecState(artifact, bytes, fx.pred);
  return 0;
}
