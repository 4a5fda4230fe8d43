// MakeJobStore: the Store a job's `store` section asks for (native, or the Redis store when this
// build has Redis), with the hook the server calls once it knows its rank (the Redis store's
// TakeOver: a new fencing incarnation), before Activate creates the tables.
#pragma once

#include <functional>
#include <memory>

#include "common/config/store_config.h"
#include "common/status.h"
#include "server/store.h"

namespace osprey::server {

struct JobStore {
  std::unique_ptr<Store> store;
  std::function<Status(int rank)> take_over;  // OK at once for the native store
};

// Unimplemented for store.type redis in a build without Redis (hiredis missing).
StatusOr<JobStore> MakeJobStore(const config::StoreConfig& config);

}  // namespace osprey::server
