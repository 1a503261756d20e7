// Closed-form ridge regression with an unpenalised bias, the fit of the dckv
// conditional models (dckv_calibration.h).
//
// Given features F [n, f] and targets Y [n, m] (fp32), returns B [f + 1, m] (fp64)
// minimising ||[F 1] B - Y||^2 + lambda * ||B[0:f, :]||^2, i.e. the solution of
//   ([F 1]^T [F 1] + lambda * diag(1, ..., 1, 0)) B = [F 1]^T Y,
// lambda = relative_lambda * trace(F_c^T F_c) / f where F_c is F with its column means
// removed (so the penalty scales with the features; callers bring blocks of features
// to comparable scales first). The last row of B is the bias.
// The system is solved by Eigen's LDLT in fp64 on centred features (bias recovered as
// mean(Y) - mean(F) B), which keeps it well conditioned.
//
// Errors: InvalidArgument when n == 0, the row counts differ, relative_lambda < 0 or
// the input is not finite; Internal when the solve fails (singular with lambda 0).
// Thread-safety: a pure function.
#pragma once

#include <Eigen/Dense>

#include "kvstash/result.h"

namespace kvstash::dckv {

Result<Eigen::MatrixXd> FitRidge(const Eigen::MatrixXf& features, const Eigen::MatrixXf& targets,
                                 double relative_lambda);

}  // namespace kvstash::dckv
