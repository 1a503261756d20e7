#include "demo/demo_workload.h"

#include <fstream>
#include <random>
#include <sstream>

#include "model/corpus/text_corpus.h"

namespace kvstash::demo {
namespace {

const char* const kSystemPrompts[] = {
    "You are a helpful assistant. Answer the question using only the document.",
    "You are a careful legal and technical reviewer. Quote the document when you can and say "
    "when it does not answer the question.",
    "You are a concise assistant for software engineers. Reply in at most two sentences.",
};

const char* const kQuestions[] = {
    "What is this document about?",
    "Summarize the first paragraph in one sentence.",
    "Which obligations or rules does the text state?",
    "Who is the author or copyright holder named in the text?",
    "Give one concrete example taken from the document.",
    "What would a new user need to know first?",
    "Is anything in the text about warranties or errors?",
    "List two important terms used in the document.",
};

}  // namespace

Result<DemoWorkload> BuildDemoWorkload(const model::Tokenizer& tokenizer,
                                       const DemoWorkloadOptions& o) {
  if (o.documents == 0 || o.requests_per_doc == 0 || o.doc_tokens == 0) {
    return Status::InvalidArgument("demo workload: documents, requests per document and document tokens must be > 0");
  }
  if (o.requests_per_doc > std::size(kQuestions)) {
    return Status::InvalidArgument("demo workload: at most " + std::to_string(std::size(kQuestions)) +
                                   " requests per document (distinct questions)");
  }
  DemoWorkload w;
  for (const char* s : kSystemPrompts) w.system_prompts.push_back(s);

  // Passages: pass p takes tokens [p * doc_tokens, (p + 1) * doc_tokens) of every file.
  std::vector<std::pair<std::string, std::vector<uint32_t>>> files;
  for (const std::string& path : model::CorpusFiles(model::CorpusSplit::kEvaluation)) {
    std::ifstream f(path, std::ios::binary);
    if (!f) continue;
    std::stringstream ss;
    ss << f.rdbuf();
    KVSTASH_ASSIGN_OR_RETURN(auto toks, tokenizer.Encode(ss.str()));
    files.emplace_back(path, std::move(toks));
  }
  std::vector<std::pair<std::string, std::vector<uint32_t>>> passages;
  for (size_t pass = 0; passages.size() < o.documents; ++pass) {
    bool any = false;
    for (const auto& [path, toks] : files) {
      const size_t b = pass * o.doc_tokens;
      if (b + o.doc_tokens > toks.size() || passages.size() == o.documents) continue;
      any = true;
      passages.emplace_back(path + "#" + std::to_string(pass),
                            std::vector<uint32_t>(toks.begin() + b, toks.begin() + b + o.doc_tokens));
    }
    if (!any) break;
  }
  if (passages.size() < o.documents) {
    return Status::NotFound("demo workload: only " + std::to_string(passages.size()) + " passages of " +
                            std::to_string(o.doc_tokens) + " tokens in the evaluation text files");
  }
  for (uint32_t d = 0; d < o.documents; ++d) {
    DemoDocument doc;
    doc.source = passages[d].first;
    doc.system_prompt = d % std::size(kSystemPrompts);
    KVSTASH_ASSIGN_OR_RETURN(doc.prefix, tokenizer.Encode(std::string("<|im_start|>system\n") +
                                                               kSystemPrompts[doc.system_prompt] +
                                                               "<|im_end|>\n<|im_start|>user\nDocument:\n"));
    doc.prefix.insert(doc.prefix.end(), passages[d].second.begin(), passages[d].second.end());
    w.documents.push_back(std::move(doc));
    for (uint32_t q = 0; q < o.requests_per_doc; ++q) {
      DemoRequest r;
      r.doc = d;
      r.question = kQuestions[(d + q) % std::size(kQuestions)];
      KVSTASH_ASSIGN_OR_RETURN(r.question_tokens,
                               tokenizer.Encode("\n\nQuestion: " + r.question + "<|im_end|>\n<|im_start|>assistant\n"));
      w.requests.push_back(std::move(r));
    }
  }
  std::mt19937_64 rng(o.seed);
  for (size_t i = w.requests.size(); i > 1; --i) {
    std::swap(w.requests[i - 1], w.requests[rng() % i]);
  }
  return w;
}

}  // namespace kvstash::demo
