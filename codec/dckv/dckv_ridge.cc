#include "codec/dckv/dckv_ridge.h"

namespace kvstash::dckv {

Result<Eigen::MatrixXd> FitRidge(const Eigen::MatrixXf& features, const Eigen::MatrixXf& targets,
                                 double relative_lambda) {
  const Eigen::Index n = features.rows(), f = features.cols(), m = targets.cols();
  if (n == 0 || targets.rows() != n) return Status::InvalidArgument("ridge: empty or mismatched rows");
  if (!(relative_lambda >= 0)) return Status::InvalidArgument("ridge: negative penalty");
  if (!features.allFinite() || !targets.allFinite()) return Status::InvalidArgument("ridge: non-finite input");
  const Eigen::RowVectorXd fmean = features.cast<double>().colwise().mean();
  const Eigen::RowVectorXd ymean = targets.cast<double>().colwise().mean();
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(f + 1, m);
  if (f > 0) {
    Eigen::MatrixXf fc = features;
    fc.rowwise() -= fmean.cast<float>();
    Eigen::MatrixXf yc = targets;
    yc.rowwise() -= ymean.cast<float>();
    Eigen::MatrixXd gram = (fc.transpose() * fc).cast<double>();
    const Eigen::MatrixXd rhs = (fc.transpose() * yc).cast<double>();
    const double lambda = relative_lambda * gram.trace() / static_cast<double>(f);
    gram.diagonal().array() += lambda;
    Eigen::LDLT<Eigen::MatrixXd> ldlt(gram);
    if (ldlt.info() != Eigen::Success) return Status::Internal("ridge: factorisation failed");
    b.topRows(f) = ldlt.solve(rhs);
    if (!b.allFinite()) return Status::Internal("ridge: singular system");
  }
  b.row(f) = ymean - fmean * b.topRows(f);
  return b;
}

}  // namespace kvstash::dckv
