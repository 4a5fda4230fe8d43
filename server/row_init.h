// The deterministic initial weights of a sparse row: element i of the row of `key` in table
// `table_id` is a pure function of (init.seed, table_id, key, i), so every store, every server and
// a pull that does not create the row (feature admission, server/admission/) agree on it.
// Every Store creates sparse rows with these weights (store.h).
#pragma once

#include <cstdint>

#include "common/config/table_config.h"

namespace osprey::server {

// Writes the initial weights of `key`'s row into w[0..dim).
void InitialRowWeights(const config::InitConfig& init, uint32_t table_id, uint64_t key, int dim,
                       float* w);

}  // namespace osprey::server
