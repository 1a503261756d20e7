// Deterministic exp and erfc in double precision, for building frequency tables.
//
// The C library's exp/erfc may differ in the last bit between libm versions and CPU
// dispatch variants (glibc picks FMA code paths at run time), and one ULP can move a
// frequency across an integer boundary. These versions use only IEEE + - * / and
// std::floor / std::ldexp (all exactly specified), evaluated in a fixed order and
// built with -ffp-contract=off, so they return the same bits on every machine. They
// are accurate to ~1e-15 relative (exp) and ~1e-10 relative (erfc), which is far below
// what a frequency table can resolve. tests/codec/data/gen_golden_tables.py mirrors them
// operation by operation.
//
// Thread-safety: pure functions.
#pragma once

namespace kvstash::entropy {

// e^x. Cody-Waite reduction x = k ln2 + r (|r| <= ln2/2, fdlibm's split of ln2),
// Taylor polynomial of degree 17 in Horner form, exact scaling by 2^k.
// Returns 0 below -745 and +inf above 709.
double DetExp(double x);

// erfc(z) = 2/sqrt(pi) * integral_z^inf e^(-t^2) dt, for any z (erfc(-z) = 2 - erfc(z)).
// For 0 <= z < 2.5: 1 - erf(z) with erf's Maclaurin series (70 terms); for z >= 2.5:
// the continued fraction e^(-z^2)/sqrt(pi) / (z + 1/2/(z + 1/(z + 3/2/(z + ...)))),
// 80 levels evaluated bottom-up.
double DetErfc(double z);

}  // namespace kvstash::entropy
