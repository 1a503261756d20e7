// Command-line validators shared by the dckv commands (`kvstash calibrate dckv`,
// `kvstash-bench codec --codec dckv|kvtc`): a value that fails is a usage error
// (exit 2) reported before any work.
//   DckvRatioValidator():          a finite target ratio > 1 (e.g. --rate).
//   PositiveFiniteValidator():     a finite number > 0 (e.g. --sensitivity-floor).
// Thread-safety: the validators are immutable after construction.
#pragma once

#include <CLI/CLI.hpp>

namespace kvstash::cli {

const CLI::Validator& DckvRatioValidator();
const CLI::Validator& PositiveFiniteValidator();

}  // namespace kvstash::cli
