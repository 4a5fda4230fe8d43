// The smallest valid job config (a sparse and a dense table and the DLRM that uses them), which
// the config tests extend with the section they test.
#pragma once

namespace osprey::config {

inline constexpr const char* kMinimalJobYaml = R"(
tables:
  - name: embeddings
    type: sparse
    dim: 16
  - name: mlp
    type: dense
model:
  type: dlrm
  embedding_dim: 16
  bottom_mlp: [32, 16]
  top_mlp: [32, 1]
)";

}  // namespace osprey::config
