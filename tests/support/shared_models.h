// Locating the real-model data in the team's shared folder (../shared/models next to
// the repository root, see that folder's README.md). These files are never copied
// into the repository: tests that need them skip with a visible message when absent.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/test_util.h"

namespace kvstash::testing {

// KVSTASH_SHARED_MODELS_DIR, else <source>/../shared/models.
inline std::string SharedModelsDir() {
  const char* env = std::getenv("KVSTASH_SHARED_MODELS_DIR");
  if (env != nullptr && *env != '\0') return env;
  return SourceDir() + "/../shared/models";
}

// Path of `name` in SharedModelsDir().
inline std::string SharedModelPath(const std::string& name) { return SharedModelsDir() + "/" + name; }

}  // namespace kvstash::testing

// Skips the current test unless the shared model file `name` exists.
#define KVSTASH_REQUIRE_SHARED_MODEL(name)                                                               \
  do {                                                                                                   \
    const std::string _p = ::kvstash::testing::SharedModelPath(name);                                    \
    if (!std::filesystem::exists(_p)) {                                                                  \
      GTEST_SKIP() << "shared model file " << _p                                                         \
                   << " not found (set KVSTASH_SHARED_MODELS_DIR to the folder holding " << name << ")"; \
    }                                                                                                    \
  } while (0)
