#include "numerics/det_math_double.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvstash::numerics {
namespace {
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm: 32 significant bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390e+00;
constexpr double kInvSqrtPi = 5.64189583547756286948e-01;

int64_t FloorToInt64(double x) {
  const auto t = static_cast<int64_t>(x);
  return (static_cast<double>(t) > x) ? t - 1 : t;
}
}  // namespace

double DetExp(double x) {
  if (x != x) return x;
  if (x < -745.0) return 0.0;
  if (x > 709.0) return std::numeric_limits<double>::infinity();
  const double k = std::floor(x * kInvLn2 + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double s = 1.0;
  for (int n = 17; n >= 1; --n) s = 1.0 + r * s / n;
  return std::ldexp(s, static_cast<int>(k));
}

double DetErfc(double z) {
  if (z != z) return z;
  if (z < 0.0) return 2.0 - DetErfc(-z);
  if (z < 2.5) {
    // erf(z) = 2/sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1))
    const double z2 = z * z;
    double term = z;  // (-1)^n z^(2n+1) / n!
    double sum = z;
    for (int n = 1; n < 70; ++n) {
      term = -term * z2 / n;
      sum = sum + term / (2 * n + 1);
    }
    return 1.0 - kTwoOverSqrtPi * sum;
  }
  double f = z;
  for (int n = 80; n >= 1; --n) f = z + (0.5 * n) / f;
  return DetExp(-(z * z)) * kInvSqrtPi / f;
}

double DetLogD(double x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1).
  uint64_t bits = std::bit_cast<uint64_t>(x);
  int e = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  double m = std::bit_cast<double>((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  if (m > 1.41421356237309504880) {
    m *= 0.5;
    ++e;
  }
  const double s = (m - 1.0) / (m + 1.0);  // |s| <= 0.1716
  const double s2 = s * s;
  double sum = 0.0;
  for (int i = 41; i >= 1; i -= 2) sum = 1.0 / static_cast<double>(i) + s2 * sum;
  constexpr double kLn2 = 6.93147180559945309417e-01;
  return static_cast<double>(e) * kLn2 + 2.0 * s * sum;
}

void DetSinCosD(double x, double* s, double* c) {
  // x = k (pi/2) + r with pi/2 split in three parts (Cody-Waite; P1, P2 have 33 bits,
  // so k*P1 and k*P2 are exact for |k| < 2^20).
  constexpr double kP1 = 1.57079632673412561417e+00;
  constexpr double kP2 = 6.07710050650619224932e-11;
  constexpr double kP3 = 2.02226624879595063154e-21;
  const int64_t k = FloorToInt64(x * 6.36619772367581382433e-01 + 0.5);
  const double kd = static_cast<double>(k);
  const double r = ((x - kd * kP1) - kd * kP2) - kd * kP3;
  const double r2 = r * r;
  // Taylor series on |r| <= pi/4: terms to r^23 / r^22 (error < 1e-20).
  double sn = 0.0, cs = 0.0;
  {
    double t = 1.0;  // r^(2i+1)/(2i+1)! built from the highest term down
    double acc = 0.0;
    for (int i = 11; i >= 0; --i) {
      t = 1.0;
      for (int j = 1; j <= 2 * i + 1; ++j) t = t / static_cast<double>(j);
      acc = acc * r2 + ((i % 2) ? -t : t);
    }
    sn = acc * r;
    acc = 0.0;
    for (int i = 11; i >= 0; --i) {
      t = 1.0;
      for (int j = 1; j <= 2 * i; ++j) t = t / static_cast<double>(j);
      acc = acc * r2 + ((i % 2) ? -t : t);
    }
    cs = acc;
  }
  switch (static_cast<int>(k & 3)) {
    case 0:
      *s = sn;
      *c = cs;
      break;
    case 1:
      *s = cs;
      *c = -sn;
      break;
    case 2:
      *s = -sn;
      *c = -cs;
      break;
    default:
      *s = -cs;
      *c = sn;
      break;
  }
}

}  // namespace kvstash::numerics
