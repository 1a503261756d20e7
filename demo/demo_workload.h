// The workload of `kvstash-demo`: a shared-prefix RAG workload on real text.
//
// Documents are passages of the files of model/corpus/text_corpus.h's EVALUATION split
// (Debian's licence texts and Python 3.11 standard-library sources shipped by
// base-files and libpython3.11-minimal), one passage of exactly doc_tokens tokens from
// the start of each file long enough (further passages of the same files when more
// documents are asked for than files qualify). The codecs are calibrated on the
// CALIBRATION split, so the workload never contains calibration text.
//
// Each request's prompt is SmolLM2's chat template:
//   prefix   = "<|im_start|>system\n" SYSTEM "<|im_end|>\n<|im_start|>user\nDocument:\n"
//              + document tokens                       (the reusable, stored prefix)
//   question = "\n\nQuestion: " Q "<|im_end|>\n<|im_start|>assistant\n"
// (the parts are tokenised separately and concatenated). Document d uses system prompt
// d % 3 and requests_per_doc different questions; the requests of all documents are
// shuffled with a fixed seed (std::mt19937_64 + Fisher-Yates), so each document's first
// request is a miss and the others are hits at shuffled positions.
//
// Errors: InvalidArgument for zero documents/requests or doc_tokens 0; NotFound when
// fewer than `documents` passages of doc_tokens tokens exist; tokenizer errors.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/result.h"
#include "model/tokenizers/tokenizer.h"

namespace kvstash::demo {

struct DemoWorkloadOptions {
  uint32_t documents = 10;        // RAG documents. Default: 10.
  uint32_t doc_tokens = 1500;     // tokens per document. Default: 1,500.
  uint32_t requests_per_doc = 3;  // requests (distinct questions) per document. Default: 3.
  uint64_t seed = 42;             // shuffle seed. Default: 42.
};

struct DemoDocument {
  std::string source;              // file path and passage index
  std::vector<uint32_t> prefix;    // system prompt + document tokens (the stored prefix)
  uint32_t system_prompt = 0;      // index of the system prompt used
};

struct DemoRequest {
  uint32_t doc = 0;                // index into documents
  std::string question;            // question text
  std::vector<uint32_t> question_tokens;  // templated question tokens (the suffix)
};

struct DemoWorkload {
  std::vector<DemoDocument> documents;
  std::vector<DemoRequest> requests;  // in the shuffled order they are sent
  std::vector<std::string> system_prompts;
  uint64_t PromptTokens(const DemoRequest& r) const {
    return documents[r.doc].prefix.size() + r.question_tokens.size();
  }
};

Result<DemoWorkload> BuildDemoWorkload(const model::Tokenizer& tokenizer,
                                       const DemoWorkloadOptions& options);

}  // namespace kvstash::demo
