// kvstash._native.RestoreCostModel: kvstash/restore_cost.h for Python engines (the vLLM
// connector's scheduler decides its hits with it). Estimates come back as
// RestoreEstimate objects (seconds); rates() as a dict. Thread-safety: as the C++
// class (internally locked); every method releases no GIL (they take microseconds).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "kvstash/restore_cost.h"
#include "native.h"

namespace kvstash::py {

void BindRestoreCost(nb::module_& m) {
  nb::class_<RestoreEstimate>(m, "RestoreEstimate",
                              "The cost model's answer for restoring `tokens` matched tokens (seconds).")
      .def_ro("tokens", &RestoreEstimate::tokens)
      .def_ro("restore_s", &RestoreEstimate::restore_s)
      .def_ro("transfer_s", &RestoreEstimate::transfer_s)
      .def_ro("decode_s", &RestoreEstimate::decode_s)
      .def_ro("recompute_s", &RestoreEstimate::recompute_s)
      .def_ro("recompute_tokens", &RestoreEstimate::recompute_tokens)
      .def_ro("informed", &RestoreEstimate::informed)
      .def_ro("decode_from_encode", &RestoreEstimate::decode_from_encode)
      .def_ro("take", &RestoreEstimate::take);

  nb::class_<RestoreCostModel>(m, "RestoreCostModel",
                               "Restore a hit only when it is estimated faster than the engine's prefill "
                               "(kvstash/restore_cost.h).")
      .def(
          "__init__",
          [](RestoreCostModel* self, const std::string& policy, uint32_t window, uint64_t min_prefill_tokens,
             double link_bytes_per_s, double margin) {
            RestoreCostOptions o;
            if (!ParseRestorePolicy(policy, &o.policy)) {
              ThrowInvalid("restore policy must be 'cost' or 'always', not '" + policy + "'");
            }
            o.window = window;
            o.min_prefill_tokens = min_prefill_tokens;
            o.link_bytes_per_s = link_bytes_per_s;
            o.margin = margin;
            if (Status s = ValidateRestoreCostOptions(o); !s.ok()) ThrowInvalid(std::string(s.message()));
            new (self) RestoreCostModel(o);
          },
          nb::arg("policy") = "cost", nb::arg("window") = 8, nb::arg("min_prefill_tokens") = 64,
          nb::arg("link_bytes_per_s") = 125e6, nb::arg("margin") = 1.0)
      .def("observe_prefill", &RestoreCostModel::ObservePrefill, nb::arg("tokens"), nb::arg("seconds"),
           "The engine prefilled `tokens` tokens in `seconds`.")
      .def("observe_restore", &RestoreCostModel::ObserveRestore, nb::arg("tokens"), nb::arg("bytes"),
           nb::arg("transfer_s"), nb::arg("decode_s"),
           "A load: `bytes` arrived in transfer_s, then `tokens` tokens were decoded and imported in decode_s.")
      .def("observe_encode", &RestoreCostModel::ObserveEncode, nb::arg("tokens"), nb::arg("bytes"),
           nb::arg("seconds"), "A save: `tokens` tokens encoded to `bytes` bytes in `seconds`.")
      .def(
          "estimate",
          [](const RestoreCostModel& c, uint64_t tokens, std::optional<uint64_t> recompute_tokens) {
            return c.Estimate(tokens, recompute_tokens.value_or(tokens));
          },
          nb::arg("tokens"), nb::arg("recompute_tokens") = nb::none(),
          "RestoreEstimate for restoring (decoding) `tokens` matched tokens that save the engine "
          "recompute_tokens tokens of prefill (default: tokens), and whether to take the hit.")
      .def_prop_ro("policy", [](const RestoreCostModel& c) { return std::string(RestorePolicyName(c.options().policy)); })
      .def("rates", [](const RestoreCostModel& c) {
        const RestoreRates r = c.rates();
        nb::dict d;
        d["prefill_s_per_token"] = r.prefill_s_per_token;
        d["decode_s_per_token"] = r.decode_s_per_token;
        d["encode_s_per_token"] = r.encode_s_per_token;
        d["link_s_per_byte"] = r.link_s_per_byte;
        d["bytes_per_token"] = r.bytes_per_token;
        d["prefill_samples"] = r.prefill_samples;
        d["decode_samples"] = r.decode_samples;
        d["encode_samples"] = r.encode_samples;
        d["link_samples"] = r.link_samples;
        return d;
      }, "The medians the estimate uses (0 where no sample exists yet) and the sample counts.");
}

}  // namespace kvstash::py
