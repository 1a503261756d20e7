#include "tests/determinism/determinism_cuda.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_codec.h"
#include "common/file_bytes.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/dckv_decode.h"
#include "gpu_kernels/spec_payload_decode.h"
#include "model/predictor/spec_predictor.h"
#include "model/predictor/spec_predictor_cuda.h"
#include "tests/codec/dckv/dckv_hand_artifact.h"
#include "tests/determinism/determinism_items.h"

namespace kvstash::determinism {
namespace {

std::string Cuda(const std::string& item) { return kCudaPrefix + item; }

// The spec items: the CUDA predictor's K/V of each prompt and the committed payloads
// decoded on the GPU against it.
void SpecItems(const Inputs& in, const std::vector<std::vector<uint32_t>>& prompts, Digests* out) {
  const model::Model& m = *in.smollm;
  const KvLayout L = Layout(m.config);
  model::SpecPredictorOptions po;  // the default predictor every stored payload uses
  const std::string pv = "predictor." + po.VariantName();
  const size_t n_prompts = std::min(prompts.size(), in.prompts);
  auto fail_all = [&](const Status& s) {
    for (size_t i = 0; i < n_prompts; ++i) {
      (*out)[Cuda(pv + "." + PromptName(i) + ".kv")] = (*out)[Cuda("spec." + PromptName(i) + ".decoded")] = Error(s);
    }
  };
  auto cpu = model::SpecPredictor::Create(m, po);
  if (!cpu.ok()) return fail_all(cpu.status());
  auto gpu = model::SpecPredictorCuda::Create(**cpu);
  if (!gpu.ok()) return fail_all(gpu.status());
  std::unique_ptr<gpu::DeviceSpecDecoder> decoder;
  Status decoder_status = Status::Ok();
  if (auto bytes = ReadFileBytes(Fixture(in, "spec.kvsa")); !bytes.ok()) {
    decoder_status = bytes.status();
  } else if (auto art = spec::SpecArtifact::Parse(*bytes); !art.ok()) {
    decoder_status = art.status();
  } else if (auto d = gpu::DeviceSpecDecoder::Create(std::move(art).value(), nullptr); !d.ok()) {
    decoder_status = d.status();
  } else {
    decoder = std::make_unique<gpu::DeviceSpecDecoder>(std::move(d).value());
  }
  const Digest256 fingerprint{};  // payload fixtures are coded with an all-zero model fingerprint
  for (size_t i = 0; i < n_prompts; ++i) {
    const std::string name = PromptName(i);
    model::PredictorCache cache;
    const Status run = RunSplit(**gpu, prompts[i], in.splits, &cache);
    (*out)[Cuda(pv + "." + name + ".kv")] = run.ok() ? Hex(model::PredictorCacheDigest(cache)) : Error(run);
    const std::string item = Cuda("spec." + name + ".decoded");
    if (!run.ok() || decoder == nullptr) {
      (*out)[item] = Error(!run.ok() ? run : decoder_status);
      continue;
    }
    auto payload = ReadFileBytes(Fixture(in, "spec-" + name + ".kvsp"));
    if (!payload.ok()) {
      (*out)[item] = Error(payload.status());
      continue;
    }
    auto chunk = decoder->Decode(*payload, spec::PredictedSlice(cache, L, kChunkBegin, kPromptTokens), fingerprint,
                                 nullptr);
    (*out)[item] = chunk.ok() ? Hex(chunk->ContentChecksum()) : Error(chunk.status());
  }
}

void DckvItems(const Inputs& in, Digests* out) {
  const std::string item = Cuda("dckv.hand.decoded");
  auto decoder = gpu::DeviceDckvDecoder::Create(dckv::testing::HandArtifact(), nullptr);
  if (!decoder.ok()) {
    (*out)[item] = Error(decoder.status());
    return;
  }
  auto payload = ReadFileBytes(Fixture(in, "dckv-hand.kvdp"));
  if (!payload.ok()) {
    (*out)[item] = Error(payload.status());
    return;
  }
  auto chunk = decoder->Decode(*payload, Digest256{}, nullptr);
  (*out)[item] = chunk.ok() ? Hex(chunk->ContentChecksum()) : Error(chunk.status());
}

}  // namespace

Result<Digests> ComputeCudaDigests(const Inputs& in) {
  if (in.smollm == nullptr) return Status::InvalidArgument("determinism: no SmolLM2 model");
  std::string why;
  if (!gpu::CudaDeviceAvailable(&why)) return Status::Unavailable("determinism --cuda: no CUDA device: " + why);
  KVSTASH_ASSIGN_OR_RETURN(auto prompts, Prompts(*in.smollm));
  Digests out;
  SpecItems(in, prompts, &out);
  DckvItems(in, &out);
  return out;
}

}  // namespace kvstash::determinism
