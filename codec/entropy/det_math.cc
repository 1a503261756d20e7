#include "codec/entropy/det_math.h"

#include <cmath>
#include <limits>

namespace kvstash::entropy {
namespace {
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm: 32 significant bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390e+00;
constexpr double kInvSqrtPi = 5.64189583547756286948e-01;
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

}  // namespace kvstash::entropy
