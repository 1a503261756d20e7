#include "cli/dckv_flags.h"

#include <cmath>
#include <exception>
#include <string>

namespace kvstash::cli {
namespace {

// A validator accepting the whole string as a finite double above `floor`.
CLI::Validator FiniteAbove(double floor, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [floor, what](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double r = std::stod(v, &used);
          if (used == v.size() && std::isfinite(r) && r > floor) return "";
        } catch (const std::exception&) {
        }
        return "must be " + what + ", got " + v;
      },
      name);
}

}  // namespace

const CLI::Validator& DckvRatioValidator() {
  static const CLI::Validator v = FiniteAbove(1.0, "a finite ratio > 1", "RATIO>1");
  return v;
}

const CLI::Validator& PositiveFiniteValidator() {
  static const CLI::Validator v = FiniteAbove(0.0, "a finite number > 0", "FLOAT>0");
  return v;
}

}  // namespace kvstash::cli
