// Real text for calibration and evaluation (docs/architecture.md §8): files that every Debian
// machine of this kind has (base-files' licence texts, the Python 3.11 standard
// library of libpython3.11-minimal), split into two DISJOINT sets so that a codec is
// never evaluated on the text it was calibrated on.
//
//   calibration: GPL-3, LGPL-2.1, GFDL-1.3 (prose); argparse.py, collections/__init__.py
//   evaluation:  Apache-2.0, MPL-2.0, GPL-2, Artistic, CC0-1.0, GFDL-1.2, MPL-1.1, LGPL-2,
//                GPL-1 (prose); typing.py, inspect.py, subprocess.py, pathlib.py (code)
//
// LoadCorpus tokenises each file and cuts it into documents of at most
// `max_doc_tokens` tokens (each document is one prompt, run from its first token),
// stopping once `max_tokens` tokens are collected. Missing files are skipped and
// listed in Corpus::missing.
//
// Errors: NotFound when no file of the set exists; tokenizer errors.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizers/tokenizer.h"

namespace kvstash::model {

enum class CorpusSplit { kCalibration, kEvaluation };

struct CorpusDocument {
  std::string source;             // file path
  std::vector<uint32_t> tokens;   // one prompt
};

struct Corpus {
  std::vector<CorpusDocument> documents;
  std::vector<std::string> missing;  // files of the set that were not found
  uint64_t TotalTokens() const;
};

// The file list of a split (absolute paths).
std::vector<std::string> CorpusFiles(CorpusSplit split);

Result<Corpus> LoadCorpus(const Tokenizer& tokenizer, CorpusSplit split, uint32_t max_doc_tokens,
                          uint64_t max_tokens);

}  // namespace kvstash::model
