// The few CPU kernels osprey.torch and examples/train_dlrm.py call where torch 1.13's own ops
// cost several times more on the default job's small shapes (README, "PyTorch"): the per-key sum
// of gathered rows' gradients, and the DLRM dot interaction (the C++ worker's kernels,
// worker/models/dlrm.cc). Every kernel checks its shapes, raising ValueError naming the problem,
// and runs with the GIL released.
#pragma once

#include <nanobind/nanobind.h>

namespace osprey::python {

// Registers scatter_add_rows, dot_pairs and dot_pairs_grad on module `m`.
void AddKernels(nanobind::module_& m);

}  // namespace osprey::python
