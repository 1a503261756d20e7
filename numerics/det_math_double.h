// Deterministic double-precision elementary functions, run on the host only: e^x and
// erfc for building frequency tables (codec/entropy/pmf.cc), log and sin/cos (with e^x)
// for the predictors' RoPE tables (model/predictor, model/hybrid). The fp32 functions
// the predictors run per token are in numerics/det_math.h.
//
// The C library's exp/erfc/log/sin/cos may differ in the last bit between libm versions
// and CPU dispatch variants (glibc picks FMA code paths at run time), and one ULP can
// move a frequency across an integer boundary or change a RoPE table. These versions
// use only IEEE + - * / and std::floor / std::ldexp / integer bit manipulation (all
// exactly specified), evaluated in a fixed order and built with -ffp-contract=off, so
// they return the same bits on every machine. DetExp is accurate to ~1e-15 relative,
// DetErfc to ~1e-10 relative (far below what a frequency table can resolve), DetLogD
// and DetSinCosD to ~1e-15. tests/codec/entropy/data/gen_golden_tables.py mirrors DetExp and
// DetErfc operation by operation.
//
// Thread-safety: pure functions.
#pragma once

namespace kvstash::numerics {

// e^x. Cody-Waite reduction x = k ln2 + r (|r| <= ln2/2, fdlibm's split of ln2),
// Taylor polynomial of degree 17 in Horner form, exact scaling by 2^k.
// Returns 0 below -745 and +inf above 709.
double DetExp(double x);

// erfc(z) = 2/sqrt(pi) * integral_z^inf e^(-t^2) dt, for any z (erfc(-z) = 2 - erfc(z)).
// For 0 <= z < 2.5: 1 - erf(z) with erf's Maclaurin series (70 terms); for z >= 2.5:
// the continued fraction e^(-z^2)/sqrt(pi) / (z + 1/2/(z + 1/(z + 3/2/(z + ...)))),
// 80 levels evaluated bottom-up.
double DetErfc(double z);

// Natural log for x > 0 finite: x = m 2^e, log m = 2 atanh((m-1)/(m+1)) (series to
// degree 41).
double DetLogD(double x);

// sin and cos of x for |x| <= 2^20: Cody-Waite reduction by pi/2 (three-part split),
// Taylor series on |r| <= pi/4. Writes *s and *c.
void DetSinCosD(double x, double* s, double* c);

}  // namespace kvstash::numerics
