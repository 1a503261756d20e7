#include "tests/determinism/determinism.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codec/dckv/dckv_codec.h"
#include "codec/entropy/table_set.h"
#include "codec/spec/spec_artifact.h"
#include "codec/spec/spec_calibration.h"
#include "codec/spec/spec_codec.h"
#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "common/checksum.h"
#include "common/file_bytes.h"
#include "model/corpus/text_corpus.h"
#include "model/forward/kv_cache.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"
#include "model/rwkv7/rwkv7_predictor.h"
#include "model/rwkv7/rwkv7_state.h"
#include "tests/codec/dckv/dckv_hand_artifact.h"
#include "tests/determinism/determinism_items.h"

namespace kvstash::determinism {
namespace {

constexpr uint32_t kCalDocTokens = 256;  // spec calibration: documents of 256 tokens
constexpr uint64_t kCalTokens = 512;     //   and 512 tokens in all (fixtures only)
constexpr uint32_t kStateEvery = 256;    // RWKV-7 state boundaries (bytes of text)
constexpr uint32_t kStateBytes = 512;    //   evaluated text
constexpr uint32_t kStateCalBytes = 1024;  // calibration text (fixtures only)
constexpr int kRwkvGroup = 32;           // the golden RWKV-7 predictor (int8-g32)

// XXH3-64 over the arrays a decoder builds from a table set (decode entries and
// symbols, the packed layout when present, the encoder's per-table offsets).
uint64_t TablesDigest(const entropy::TableSet& t) {
  Xxh3Hasher h;
  auto add = [&](const void* p, size_t bytes) {
    if (p != nullptr) h.Update(std::span(static_cast<const uint8_t*>(p), bytes));
  };
  const int32_t head[2] = {t.precision(), t.symbol_bits()};
  add(head, sizeof head);
  add(t.decode_entries(), t.num_slots() * sizeof(uint32_t));
  add(t.decode_symbols(), (t.num_slots() + 1) * sizeof(uint16_t));
  add(t.packed_entries(), t.num_slots() * sizeof(uint32_t));
  for (size_t i = 0; i < t.size(); ++i) {
    const uint32_t off = t.encode_offset(i);
    add(&off, sizeof off);
  }
  return h.Digest();
}


// The RWKV-7 predictor's (or model's) states every kStateEvery tokens of `t`.
template <typename Step>
Result<std::vector<RecurrentState>> States(const rwkv7::Rwkv7Config& cfg, const std::vector<uint32_t>& t,
                                           const std::vector<uint32_t>& splits, Step step) {
  std::vector<RecurrentState> out;
  rwkv7::Rwkv7State s = rwkv7::Rwkv7State::Zeros(cfg);
  for (uint32_t b = 0; b + kStateEvery <= t.size(); b += kStateEvery) {
    // Within a boundary, feed the bytes in the requested batches (offsets mod 256).
    uint32_t at = b;
    for (uint32_t sp : splits) {
      const uint32_t e = b + sp;
      if (e > at && e < b + kStateEvery) {
        KVSTASH_RETURN_IF_ERROR(step(std::span(t).subspan(at, e - at), &s));
        at = e;
      }
    }
    KVSTASH_RETURN_IF_ERROR(step(std::span(t).subspan(at, b + kStateEvery - at), &s));
    KVSTASH_ASSIGN_OR_RETURN(RecurrentState st, rwkv7::ExportState(cfg, s));
    out.push_back(std::move(st));
  }
  return out;
}

// The first `n` bytes of the first existing file of `split`, as byte tokens.
Result<std::vector<uint32_t>> ByteText(model::CorpusSplit split, uint32_t n) {
  for (const std::string& f : model::CorpusFiles(split)) {
    auto b = ReadFileBytes(f);
    if (b.ok() && b->size() >= n) return std::vector<uint32_t>(b->begin(), b->begin() + n);
  }
  return Status::NotFound("determinism: no corpus file of " + std::to_string(n) + " bytes");
}


// Writes `bytes` to emit_dir/name when emit_dir is set; a failure becomes the item's error.
std::string Emit(const Inputs& in, const std::string& name, const std::vector<uint8_t>& bytes,
                 const std::string& digest) {
  if (in.emit_dir.empty()) return digest;
  const Status s = WriteFileBytes(in.emit_dir + "/" + name, bytes);
  return s.ok() ? digest : Error(s);
}

void SmolLmItems(const Inputs& in, const std::vector<std::vector<uint32_t>>& prompts, Digests* out) {
  const model::Model& m = *in.smollm;
  const KvLayout L = Layout(m.config);
  model::SpecPredictorOptions po;  // the default predictor every stored payload uses
  po.threads = in.threads;
  const std::string pv = "predictor." + po.VariantName();
  auto p = model::SpecPredictor::Create(m, po);
  if (!p.ok()) {
    (*out)[pv + ".weights"] = Error(p.status());
    return;
  }
  (*out)[pv + ".weights"] = Hex((*p)->Digest());

  std::shared_ptr<spec::SpecArtifact> art;
  auto art_bytes = ReadFileBytes(Fixture(in, "spec.kvsa"));
  if (!art_bytes.ok()) {
    (*out)["spec.artifact.file"] = Error(art_bytes.status());
  } else {
    (*out)["spec.artifact.file"] = Hex(Xxh3_64(*art_bytes));
    auto a = spec::SpecArtifact::Parse(*art_bytes);
    if (a.ok()) {
      art = std::make_shared<spec::SpecArtifact>(std::move(a).value());
      (*out)["spec.artifact.tables"] = Hex(TablesDigest(*art->tables));
    } else {
      (*out)["spec.artifact.tables"] = Error(a.status());
    }
  }

  const Digest256 fingerprint{};  // payload fixtures are coded with an all-zero model fingerprint
  for (size_t i = 0; i < std::min(prompts.size(), in.prompts); ++i) {
    const std::string name = PromptName(i);
    model::PredictorCache cache;
    const Status run = RunSplit(**p, prompts[i], in.splits, &cache);
    (*out)[pv + "." + name + ".kv"] = run.ok() ? Hex(model::PredictorCacheDigest(cache)) : Error(run);
    const std::string item = "spec." + name;
    if (!run.ok() || art == nullptr) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = "error: no predictor output or artifact";
      continue;
    }
    const spec::PredictedChunk pred = spec::PredictedSlice(cache, L, kChunkBegin, kPromptTokens);
    auto payload = ReadFileBytes(Fixture(in, "spec-" + name + ".kvsp"));
    if (!payload.ok()) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = Error(payload.status());
      continue;
    }
    auto chunk = spec::DecodeSpecPayload(*art, *payload, pred, fingerprint, in.threads);
    if (!chunk.ok()) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = Error(chunk.status());
      continue;
    }
    (*out)[item + ".decoded"] = Hex(chunk->ContentChecksum());
    auto again = spec::EncodeSpecPayload(*art, chunk->view(), pred, fingerprint, kChunkBegin, in.threads);
    (*out)[item + ".reencoded"] =
        again.ok() ? Emit(in, "spec-" + name + ".kvsp", *again, Hex(Xxh3_64(*again))) : Error(again.status());
  }
}

void Rwkv7Items(const Inputs& in, Digests* out) {
  const rwkv7::Rwkv7Model& m = *in.rwkv7;
  rwkv7::Rwkv7PredictorOptions o;
  o.group = kRwkvGroup;
  const std::string pv = "rwkv7.predictor." + o.Name();
  auto p = rwkv7::Rwkv7Predictor::Create(m, o);
  auto text = ByteText(model::CorpusSplit::kEvaluation, kStateBytes);
  if (!p.ok() || !text.ok()) {
    (*out)[pv + ".state"] = Error(!p.ok() ? p.status() : text.status());
    return;
  }
  auto states = States(m.config(), *text, in.splits,
                       [&](std::span<const uint32_t> x, rwkv7::Rwkv7State* s) { return p->Eval(x, s); });
  if (!states.ok()) {
    (*out)[pv + ".state"] = Error(states.status());
    return;
  }
  std::unique_ptr<spec::SpecStateArtifact> art;
  auto art_bytes = ReadFileBytes(Fixture(in, "rwkv7.kvss"));
  Status art_status = art_bytes.status();
  if (art_bytes.ok()) {
    auto a = spec::SpecStateArtifact::Parse(*art_bytes);
    art_status = a.status();
    if (a.ok()) art = std::make_unique<spec::SpecStateArtifact>(std::move(a).value());
  }
  (*out)["rwkv7.spec-state.artifact.tables"] = art ? Hex(TablesDigest(art->tables())) : Error(art_status);
  for (size_t i = 0; i < states->size(); ++i) {
    const RecurrentState& pred = (*states)[i];
    const std::string at = std::to_string(pred.boundary_tokens);
    (*out)[pv + ".state@" + at] = Hex(pred.ContentChecksum());
    const std::string item = "rwkv7.spec-state@" + at;
    if (art == nullptr) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = Error(art_status);
      continue;
    }
    auto body = ReadFileBytes(Fixture(in, "rwkv7-state-" + at + ".kvsc"));
    if (!body.ok()) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = Error(body.status());
      continue;
    }
    auto back = spec::DecodeSpecState(*art, *body, pred);
    if (!back.ok()) {
      (*out)[item + ".decoded"] = (*out)[item + ".reencoded"] = Error(back.status());
      continue;
    }
    (*out)[item + ".decoded"] = Hex(back->ContentChecksum());
    auto again = spec::EncodeSpecState(*art, *back, pred);
    (*out)[item + ".reencoded"] =
        again.ok() ? Emit(in, "rwkv7-state-" + at + ".kvsc", *again, Hex(Xxh3_64(*again))) : Error(again.status());
  }
}

// The dckv payload of the hand artifact: its quantised rows (fixed formula)
// reconstructed and encoded (a lossy re-encode of a decoded chunk is not the same
// payload, so both platforms encode these rows: fixtures/dckv-hand.kvdp on x86-64).
Result<std::vector<uint8_t>> HandDckvPayload(const dckv::DckvCodec& codec) {
  KVSTASH_ASSIGN_OR_RETURN(
      KvChunk chunk, codec.Reconstruct(dckv::testing::HandQuantized(codec.artifact(), kDckvTokens), kDckvOffset));
  return codec.Encode(chunk.view(), kDckvOffset, kDckvOffset + kDckvTokens, Digest256{});
}

// The dckv items: the hand artifact (fixed integer formulas: the same bytes on every
// machine), the committed payload decoded, and this build's encoding of the same rows.
void DckvItems(const Inputs& in, Digests* out) {
  const dckv::DckvArtifact a = dckv::testing::HandArtifact();
  (*out)["dckv.hand.artifact"] = Hex(Xxh3_64(a.Serialize()));
  auto codec = dckv::DckvCodec::Create(a);
  if (!codec.ok()) {
    (*out)["dckv.hand.decoded"] = (*out)["dckv.hand.encoded"] = Error(codec.status());
    return;
  }
  codec->set_threads(static_cast<uint32_t>(in.threads));
  auto encoded = HandDckvPayload(*codec);
  (*out)["dckv.hand.encoded"] = encoded.ok() ? Emit(in, "dckv-hand.kvdp", *encoded, Hex(Xxh3_64(*encoded)))
                                             : Error(encoded.status());
  auto payload = ReadFileBytes(Fixture(in, "dckv-hand.kvdp"));
  if (!payload.ok()) {
    (*out)["dckv.hand.decoded"] = Error(payload.status());
    return;
  }
  auto chunk = codec->Decode(*payload, Digest256{});
  (*out)["dckv.hand.decoded"] = chunk.ok() ? Hex(chunk->ContentChecksum()) : Error(chunk.status());
}

Status WriteDckvFixture(const Inputs& in) {
  KVSTASH_ASSIGN_OR_RETURN(auto codec, dckv::DckvCodec::Create(dckv::testing::HandArtifact()));
  KVSTASH_ASSIGN_OR_RETURN(auto payload, HandDckvPayload(codec));
  return WriteFileBytes(Fixture(in, "dckv-hand.kvdp"), payload);
}

}  // namespace

bool OutsidePrompts(const std::string& item, size_t prompts) {
  const size_t at = item.find(".eval");
  if (at == std::string::npos) return false;
  size_t end = at + 5;
  while (end < item.size() && std::isdigit(static_cast<unsigned char>(item[end]))) ++end;
  if (end == at + 5 || end >= item.size() || item[end] != '.') return false;
  return std::stoul(item.substr(at + 5, end - at - 5)) >= prompts;
}

Result<Digests> ComputeDigests(const Inputs& in) {
  if (in.smollm == nullptr) return Status::InvalidArgument("determinism: no SmolLM2 model");
  KVSTASH_ASSIGN_OR_RETURN(auto prompts, Prompts(*in.smollm));
  Digests out;
  SmolLmItems(in, prompts, &out);
  if (in.rwkv7 != nullptr) Rwkv7Items(in, &out);
  DckvItems(in, &out);
  return out;
}

Status WriteFixtures(const Inputs& in) {
  if (in.smollm == nullptr || in.rwkv7 == nullptr) {
    return Status::InvalidArgument("determinism: --write needs both the SmolLM2 and the RWKV-7 model");
  }
  std::filesystem::create_directories(in.fixtures_dir);
  KVSTASH_RETURN_IF_ERROR(WriteDckvFixture(in));
  const model::Model& m = *in.smollm;
  const KvLayout L = Layout(m.config);
  model::SpecPredictorOptions po;
  po.threads = in.threads;
  KVSTASH_ASSIGN_OR_RETURN(auto p, model::SpecPredictor::Create(m, po));
  model::PrefillOptions fo;
  fo.logits = model::PrefillOptions::Logits::kNone;

  // Spec artifact: the CALIBRATION split, 256-token bf16 chunks, as `kvstash calibrate spec`.
  KVSTASH_ASSIGN_OR_RETURN(model::Corpus cal, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kCalibration,
                                                              kCalDocTokens, kCalTokens));
  struct Pair {
    KvChunk exact;
    model::PredictorCache pred;
  };
  std::vector<Pair> pairs;
  for (const auto& d : cal.documents) {
    model::KvCache target = model::KvCache::ForModel(m.config);
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m, d.tokens, &target, fo).status());
    Pair pr;
    KVSTASH_ASSIGN_OR_RETURN(pr.exact, model::ToKvChunk(target, 0, static_cast<uint32_t>(d.tokens.size()), DType::kBF16));
    KVSTASH_RETURN_IF_ERROR(p->Run(d.tokens, &pr.pred));
    pairs.push_back(std::move(pr));
  }
  spec::CalibrationOptions co;
  co.contexts.dtype = DType::kBF16;
  co.predictor_digest = p->Digest();
  co.predictor_variant = po.VariantName();
  co.threads = in.threads;
  KVSTASH_ASSIGN_OR_RETURN(auto cb, spec::SpecCalibrator::Create(L, co));
  for (const Pair& pr : pairs) {
    KVSTASH_RETURN_IF_ERROR(cb.AddVariance(pr.exact.view(), spec::PredictedSlice(pr.pred, L, 0, pr.pred.tokens)));
  }
  KVSTASH_RETURN_IF_ERROR(cb.FreezeSigma());
  for (const Pair& pr : pairs) {
    KVSTASH_RETURN_IF_ERROR(cb.AddHistogram(pr.exact.view(), spec::PredictedSlice(pr.pred, L, 0, pr.pred.tokens)));
  }
  KVSTASH_ASSIGN_OR_RETURN(spec::SpecArtifact art, cb.Build());
  KVSTASH_RETURN_IF_ERROR(WriteFileBytes(Fixture(in, "spec.kvsa"), art.Serialize()));

  // Spec payloads: the true KV of each evaluation prompt's last 8 tokens.
  KVSTASH_ASSIGN_OR_RETURN(auto prompts, Prompts(m));
  for (size_t i = 0; i < prompts.size(); ++i) {
    model::KvCache target = model::KvCache::ForModel(m.config);
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m, prompts[i], &target, fo).status());
    KVSTASH_ASSIGN_OR_RETURN(KvChunk exact, model::ToKvChunk(target, kChunkBegin, kPromptTokens, DType::kBF16));
    model::PredictorCache pred;
    KVSTASH_RETURN_IF_ERROR(p->Run(prompts[i], &pred));
    KVSTASH_ASSIGN_OR_RETURN(auto payload,
                             spec::EncodeSpecPayload(art, exact.view(), spec::PredictedSlice(pred, L, kChunkBegin, kPromptTokens),
                                                     Digest256{}, kChunkBegin, in.threads));
    KVSTASH_RETURN_IF_ERROR(WriteFileBytes(Fixture(in, "spec-" + PromptName(i) + ".kvsp"), payload));
  }

  // RWKV-7 state artifact (calibration text) and coded states (evaluation text).
  rwkv7::Rwkv7PredictorOptions ro;
  ro.group = kRwkvGroup;
  KVSTASH_ASSIGN_OR_RETURN(auto rp, rwkv7::Rwkv7Predictor::Create(*in.rwkv7, ro));
  const auto& cfg = in.rwkv7->config();
  auto exact_step = [&](std::span<const uint32_t> x, rwkv7::Rwkv7State* s) { return in.rwkv7->EvalSequence(x, s, {}); };
  auto pred_step = [&](std::span<const uint32_t> x, rwkv7::Rwkv7State* s) { return rp.Eval(x, s); };
  KVSTASH_ASSIGN_OR_RETURN(auto cal_text, ByteText(model::CorpusSplit::kCalibration, kStateCalBytes));
  KVSTASH_ASSIGN_OR_RETURN(auto cal_exact, States(cfg, cal_text, {}, exact_step));
  KVSTASH_ASSIGN_OR_RETURN(auto cal_pred, States(cfg, cal_text, {}, pred_step));
  std::vector<spec::StateCalibrationPair> sp;
  for (size_t i = 0; i < cal_exact.size(); ++i) sp.push_back({&cal_exact[i], &cal_pred[i]});
  KVSTASH_ASSIGN_OR_RETURN(spec::SpecStateArtifact sart, spec::CalibrateSpecState(sp));
  KVSTASH_RETURN_IF_ERROR(WriteFileBytes(Fixture(in, "rwkv7.kvss"), sart.Serialize()));
  KVSTASH_ASSIGN_OR_RETURN(auto ev_text, ByteText(model::CorpusSplit::kEvaluation, kStateBytes));
  KVSTASH_ASSIGN_OR_RETURN(auto ev_exact, States(cfg, ev_text, {}, exact_step));
  KVSTASH_ASSIGN_OR_RETURN(auto ev_pred, States(cfg, ev_text, {}, pred_step));
  for (size_t i = 0; i < ev_exact.size(); ++i) {
    KVSTASH_ASSIGN_OR_RETURN(auto body, spec::EncodeSpecState(sart, ev_exact[i], ev_pred[i]));
    const std::string at = std::to_string(ev_exact[i].boundary_tokens);
    KVSTASH_RETURN_IF_ERROR(WriteFileBytes(Fixture(in, "rwkv7-state-" + at + ".kvsc"), body));
  }
  return Status::Ok();
}

std::vector<std::string> CompareDigests(const Digests& manifest, const Digests& got) {
  std::vector<std::string> differ;
  for (const auto& [name, value] : manifest) {
    auto it = got.find(name);
    if (it == got.end() || it->second != value) differ.push_back(name);
  }
  for (const auto& [name, value] : got) {
    if (!manifest.contains(name)) differ.push_back(name);
  }
  std::sort(differ.begin(), differ.end());
  return differ;
}

Result<Digests> ReadManifest(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto bytes, ReadFileBytes(path));
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("items") || !j["items"].is_object() || j.value("format", 0) != 1) {
    return Status::Corruption(path + ": not a format-1 determinism manifest");
  }
  Digests d;
  for (const auto& [name, value] : j["items"].items()) {
    if (!value.is_string()) return Status::Corruption(path + ": item " + name + " is not a string");
    d[name] = value.get<std::string>();
  }
  return d;
}

Status WriteManifest(const std::string& path, const Digests& digests) {
  nlohmann::ordered_json j;
  j["format"] = 1;
  j["about"] = "Golden digests of issue 21 (docs/determinism.md). Regenerate only with "
               "kvstash_determinism --write, and only when a format version changes or an item is added.";
  j["items"] = nlohmann::ordered_json::object();
  for (const auto& [name, value] : digests) j["items"][name] = value;
  const std::string text = j.dump(2) + "\n";
  return WriteFileBytes(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace kvstash::determinism
