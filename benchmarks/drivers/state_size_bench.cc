// The driver of `kvstash-bench state` (state_size_bench.h).
#include "benchmarks/drivers/state_size_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "common/file_bytes.h"
#include "kvstash/payload_format.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv_file.h"
#include "model/rwkv7/state_size.h"

namespace kvstash::bench {
namespace {

using rwkv7::Rwkv7Model;
using rwkv7::Rwkv7State;
using rwkv7::StatePartSize;

// "16,64,end" -> sorted unique token counts; "end" is the text length.
Result<std::vector<uint32_t>> ParseBoundaries(const std::string& list, size_t text_bytes) {
  std::vector<uint32_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "end") {
      out.push_back(static_cast<uint32_t>(text_bytes));
      continue;
    }
    char* end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > text_bytes) {
      return Status::InvalidArgument("boundary '" + item + "' is not in 1.." +
                                     std::to_string(text_bytes) + " (the text's bytes) or 'end'");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return Status::InvalidArgument("no boundaries given");
  return out;
}

// -log2 softmax(logits)[next].
double SurprisalBits(const std::vector<float>& logits, uint32_t next) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l - mx));
  return -((static_cast<double>(logits[next] - mx) - std::log(z)) / std::log(2.0));
}

// Exports `state`, checks record and runtime round trips, measures the parts.
Result<std::vector<StatePartSize>> MeasureBoundary(const Rwkv7Model& model,
                                                   const Rwkv7State& state, int zstd_level) {
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState exported, rwkv7::ExportState(model.config(), state));
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> record,
                           EncodeStateRecord(exported, model.fingerprint()));
  KVSTASH_ASSIGN_OR_RETURN(DecodedStateRecord decoded, DecodeStateRecord(record));
  KVSTASH_ASSIGN_OR_RETURN(Rwkv7State back, rwkv7::ImportState(model.config(), decoded.state));
  if (!(decoded.state == exported) || !back.BitEqual(state)) {
    return Status::Internal("state round trip differs at boundary " + std::to_string(state.tokens));
  }
  return rwkv7::MeasureStateParts(exported, zstd_level);
}

}  // namespace

Result<StateBenchResult> RunStateBench(const StateBenchOptions& o,
                                       const std::function<void(const nlohmann::json& row)>& on_row) {
  auto model = Rwkv7Model::Load(o.model);
  if (!model.ok()) {
    return Status::IOError(o.model + ": " + model.status().ToString());
  }
  auto text = ReadFileBytes(o.text);
  if (!text.ok() || text->empty()) {
    return Status::IOError("cannot read text " + o.text);
  }
  auto boundaries = ParseBoundaries(o.boundaries, text->size());
  if (!boundaries.ok()) {
    return Status::InvalidArgument(boundaries.status().ToString());
  }
  const rwkv7::Rwkv7Config& cfg = model->config();
  if (cfg.n_vocab != 256) {
    return Status::InvalidArgument("the text is fed as bytes; the model's vocab is " +
                                   std::to_string(cfg.n_vocab) + ", not 256");
  }

  nlohmann::json rows = nlohmann::json::array();
  Rwkv7State state = Rwkv7State::Zeros(cfg);
  std::vector<float> logits(cfg.n_vocab);
  double bits = 0.0;
  double eval_seconds = 0.0;
  size_t next_boundary = 0;
  const uint32_t last = boundaries->back();
  for (uint32_t i = 0; i < last; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = model->Eval((*text)[i], &state, logits); !s.ok()) {
      return Status::InvalidArgument(s.ToString());
    }
    eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i + 1 < text->size()) bits += SurprisalBits(logits, (*text)[i + 1]);
    if (state.tokens != (*boundaries)[next_boundary]) continue;
    ++next_boundary;
    auto parts = MeasureBoundary(*model, state, o.zstd_level);
    if (!parts.ok()) {
      return Status::Internal(parts.status().ToString());
    }
    for (const StatePartSize& p : *parts) {
      const double raw = static_cast<double>(p.raw_bytes);
      nlohmann::json row = {{"boundary_tokens", state.tokens},
                      {"part", p.part},
                      {"tensors", p.tensors},
                      {"scalars", p.scalars},
                      {"raw_bytes", p.raw_bytes},
                      {"zstd_bytes", p.zstd_bytes},
                      {"zstd_shuffled_bytes", p.zstd_shuffled_bytes},
                      {"byteplane_entropy_bytes", p.byteplane_bytes},
                      {"zstd_ratio_vs_raw", p.zstd_bytes / raw},
                      {"zstd_shuffled_ratio_vs_raw", p.zstd_shuffled_bytes / raw},
                      {"byteplane_ratio_vs_raw", p.byteplane_bytes / raw},
                      {"zstd_bits_per_scalar", 8.0 * p.zstd_bytes / p.scalars},
                      {"zstd_shuffled_bits_per_scalar", 8.0 * p.zstd_shuffled_bytes / p.scalars},
                      {"byteplane_bits_per_scalar", 8.0 * p.byteplane_bytes / p.scalars}};
      if (on_row) on_row(row);
      rows.push_back(std::move(row));
    }
  }
  const size_t predicted = std::min<size_t>(last, text->size() - 1);
  const double bpb = predicted > 0 ? bits / static_cast<double>(predicted) : 0.0;
  const double tps = eval_seconds > 0 ? last / eval_seconds : 0.0;
  StateBenchResult out;
  out.summary["bench"] = "state";
  out.summary["model"] = o.model;
  out.summary["model_fingerprint"] = ToHex(model->fingerprint());
  out.summary["text"] = o.text;
  out.summary["text_bytes"] = text->size();
  out.summary["zstd_level"] = o.zstd_level;
  out.summary["bits_per_byte"] = bpb;
  out.summary["tokens_per_second"] = tps;
  out.summary["rows"] = rows;
  out.predicted_bytes = predicted;
  return out;
}

}  // namespace kvstash::bench
