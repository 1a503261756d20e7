#include "model/corpus/text_corpus.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace kvstash::model {

uint64_t Corpus::TotalTokens() const {
  uint64_t n = 0;
  for (const auto& d : documents) n += d.tokens.size();
  return n;
}

std::vector<std::string> CorpusFiles(CorpusSplit split) {
  const std::string lic = "/usr/share/common-licenses/";
  const std::string py = "/usr/lib/python3.11/";
  if (split == CorpusSplit::kCalibration) {
    return {lic + "GPL-3", lic + "LGPL-2.1", lic + "GFDL-1.3", py + "argparse.py",
            py + "collections/__init__.py"};
  }
  return {lic + "Apache-2.0", py + "typing.py",  lic + "MPL-2.0",  py + "inspect.py",
          lic + "GPL-2",      lic + "Artistic",  py + "subprocess.py", lic + "CC0-1.0",
          lic + "GFDL-1.2",   py + "pathlib.py", lic + "MPL-1.1",  lic + "LGPL-2",
          lic + "GPL-1"};
}

Result<Corpus> LoadCorpus(const Tokenizer& tokenizer, CorpusSplit split, uint32_t max_doc_tokens,
                          uint64_t max_tokens) {
  if (max_doc_tokens == 0) return Status::InvalidArgument("corpus: max_doc_tokens must be > 0");
  Corpus c;
  bool any = false;
  for (const std::string& path : CorpusFiles(split)) {
    if (c.TotalTokens() >= max_tokens) break;
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      c.missing.push_back(path);
      continue;
    }
    any = true;
    std::stringstream ss;
    ss << f.rdbuf();
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint32_t> toks, tokenizer.Encode(ss.str()));
    for (size_t at = 0; at < toks.size() && c.TotalTokens() < max_tokens; at += max_doc_tokens) {
      const size_t n = std::min<uint64_t>({uint64_t{max_doc_tokens}, uint64_t{toks.size() - at},
                                            max_tokens - c.TotalTokens()});
      c.documents.push_back({path, std::vector<uint32_t>(toks.begin() + at, toks.begin() + at + n)});
    }
  }
  if (!any) return Status::NotFound("corpus: none of the text files of this split exist");
  return c;
}

}  // namespace kvstash::model
