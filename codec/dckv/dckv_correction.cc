#include "codec/dckv/dckv_correction.h"

#include <cblas.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "codec/dckv/dckv_gelu.h"

namespace kvstash::dckv {
namespace {

Status CheckNet(const DckvNet& net, uint32_t inputs, uint32_t outputs, const char* what) {
  if (net.hidden == 0) {
    if (!net.w1.empty() || !net.b1.empty() || !net.w2.empty() || !net.b2.empty()) {
      return Status::InvalidArgument(std::string("dckv: ") + what + " net has weights but 0 hidden units");
    }
    return Status::Ok();
  }
  if (net.hidden > kMaxCorrectionHidden || inputs == 0 || outputs == 0 ||
      net.w1.size() != static_cast<size_t>(net.hidden) * inputs || net.b1.size() != net.hidden ||
      net.w2.size() != static_cast<size_t>(outputs) * net.hidden || net.b2.size() != outputs) {
    return Status::InvalidArgument(std::string("dckv: ") + what + " net has inconsistent shapes");
  }
  for (const auto* v : {&net.w1, &net.b1, &net.w2, &net.b2}) {
    for (float w : *v) {
      if (!(std::fabs(w) <= kMaxCorrectionWeight)) {  // also false for NaN
        return Status::InvalidArgument(std::string("dckv: ") + what + " net weight non-finite or above 2^32");
      }
    }
  }
  return Status::Ok();
}

// m[rows][cols] -> [cols][rows].
std::vector<float> Transpose(const std::vector<float>& m, uint32_t rows, uint32_t cols) {
  std::vector<float> t(m.size());
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) t[static_cast<size_t>(c) * rows + r] = m[static_cast<size_t>(r) * cols + c];
  }
  return t;
}

}  // namespace

Status CheckCorrectionNets(const DckvGroup& g) {
  KVSTASH_RETURN_IF_ERROR(CheckNet(g.decoder_net, g.n_active(), g.dims, "decoder"));
  KVSTASH_RETURN_IF_ERROR(CheckNet(g.encoder_net, g.dims, g.n_active(), "encoder"));
  if (!g.decoder_net.empty()) {
    for (float m : g.mean) {
      if (std::bit_cast<uint32_t>(m) == 0x80000000u) {
        return Status::InvalidArgument("dckv: a group with a decoder net has -0.0 in its mean");
      }
    }
  }
  return Status::Ok();
}

PackedDecoderNet PackDecoderNet(const DckvNet& net, uint32_t n_active, uint32_t dims) {
  PackedDecoderNet p;
  p.w1t = PackBasis(Transpose(net.w1, net.hidden, n_active), n_active, net.hidden);
  p.w2t = PackBasis(Transpose(net.w2, dims, net.hidden), net.hidden, dims);
  return p;
}

void ApplyDecoderCorrection(const PackedDecoderNet& packed, const DckvNet& net, std::span<const float> coef,
                            uint32_t rows, std::span<float> x, SynthesisPath path) {
  const uint32_t dims = packed.w2t.dims;
  std::vector<float> h(static_cast<size_t>(rows) * net.hidden), o(static_cast<size_t>(rows) * dims);
  SynthesizeRows(packed.w1t, net.b1, coef, rows, h, path);
  GeluInPlace(h);
  SynthesizeRows(packed.w2t, net.b2, h, rows, o, path);
  for (size_t i = 0; i < o.size(); ++i) x[i] = x[i] + o[i];
}

void ApplyDecoderCorrectionReference(const DckvNet& net, uint32_t n_active, uint32_t dims,
                                     std::span<const float> coef, uint32_t rows, std::span<float> x) {
  std::vector<float> h(net.hidden);
  for (uint32_t r = 0; r < rows; ++r) {
    const float* c = coef.data() + static_cast<size_t>(r) * n_active;
    for (uint32_t k = 0; k < net.hidden; ++k) {
      float a = net.b1[k];
      for (uint32_t i = 0; i < n_active; ++i) {
        if (c[i] != 0.0f) a = a + c[i] * net.w1[static_cast<size_t>(k) * n_active + i];
      }
      h[k] = Gelu(a);
    }
    for (uint32_t j = 0; j < dims; ++j) {
      float o = net.b2[j];
      for (uint32_t k = 0; k < net.hidden; ++k) {
        if (h[k] != 0.0f) o = o + h[k] * net.w2[static_cast<size_t>(j) * net.hidden + k];
      }
      float& xj = x[static_cast<size_t>(r) * dims + j];
      xj = xj + o;
    }
  }
}

void AddEncoderCorrection(const DckvNet& net, uint32_t dims, uint32_t n_active, std::span<const float> u,
                          uint32_t rows, std::span<float> y) {
  if (rows == 0) return;
  const uint32_t H = net.hidden;
  std::vector<float> a(static_cast<size_t>(rows) * H);
  for (uint32_t r = 0; r < rows; ++r) std::copy(net.b1.begin(), net.b1.end(), a.begin() + static_cast<size_t>(r) * H);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(H),
              static_cast<int>(dims), 1.0f, u.data(), static_cast<int>(dims), net.w1.data(), static_cast<int>(dims),
              1.0f, a.data(), static_cast<int>(H));
  GeluInPlace(a);
  for (uint32_t r = 0; r < rows; ++r) {
    float* yr = y.data() + static_cast<size_t>(r) * n_active;
    for (uint32_t i = 0; i < n_active; ++i) yr[i] += net.b2[i];
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n_active),
              static_cast<int>(H), 1.0f, a.data(), static_cast<int>(H), net.w2.data(), static_cast<int>(H), 1.0f,
              y.data(), static_cast<int>(n_active));
}

}  // namespace kvstash::dckv
