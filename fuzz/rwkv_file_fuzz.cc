// Fuzzes the rwkv.cpp model-file loader (model/rwkv7/rwkv_file.h, rwkv7_model.h) on
// arbitrary bytes. Any input must give a Status, never a crash, leak or UB; a file
// that parses must serialise back to the same bytes; a model that loads must evaluate
// a token from the zero state and round-trip that state exactly.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvstash::rwkv7;
  std::span<const uint8_t> in(data, size);
  auto file = ParseRwkvFile(in);
  if (!file.ok()) return 0;
  auto again = SerializeRwkvFile(*file);
  if (!again.ok() || again->size() != size || !std::equal(again->begin(), again->end(), data)) {
    std::abort();  // a file we accept must be exactly what we would write
  }
  auto model = Rwkv7Model::FromBytes(in);
  if (!model.ok()) return 0;
  const Rwkv7Config& cfg = model->config();
  Rwkv7State state = Rwkv7State::Zeros(cfg);
  std::vector<float> logits(cfg.n_vocab);
  if (!model->Eval(0, &state, logits).ok()) std::abort();
  auto exported = ExportState(cfg, state);
  if (!exported.ok()) std::abort();
  auto back = ImportState(cfg, *exported);
  if (!back.ok() || !back->BitEqual(state)) std::abort();
  return 0;
}
