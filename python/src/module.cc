// kvstash._native: the entry point of the native module; each Bind* lives in its own
// file (errors.cc, keys.cc, client.cc, codec.cc, reference_model.cc, restore_cost.cc,
// paged_kv.cc; cuda/cuda_module.cc only in the KVSTASH_PYTHON_CUDA build).
#include "native.h"

NB_MODULE(_native, m) {
  m.doc() = "Native part of the kvstash package (use the kvstash module, not this one).";
  kvstash::py::BindErrors(m);
  kvstash::py::BindKeys(m);
  kvstash::py::BindClient(m);
  kvstash::py::BindCodec(m);
  kvstash::py::BindReferenceModel(m);
  kvstash::py::BindRestoreCost(m);
  kvstash::py::BindPagedKv(m);
#if defined(KVSTASH_PYTHON_CUDA)
  nanobind::module_ cuda = m.def_submodule("_cuda", "CUDA restore and paged KV scatter/gather (optional build; use kvstash.cuda).");
  kvstash::py::BindCuda(cuda);
#endif
}
