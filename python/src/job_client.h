// JobClient: what the Python module osprey._C wraps -- one worker's membership of a running
// Osprey job: the job config, the coordinator client (registration, heartbeats, barriers, the
// final report) and the parameter-server Client. No Python in here: the binding (module.cc)
// converts arrays and errors and releases the GIL around every call that may block.
//
// Lifetime and fork: a JobClient belongs to the process that made it. In a forked child its
// threads (transport I/O, heartbeats) do not exist, so every call there fails with
// FailedPrecondition and the destructor leaks the parts instead of joining threads that are gone.
//
// Threading: every method is thread-safe (the Client and CoordinatorClient are).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator_client.h"
#include "job/job_config.h"
#include "worker/client/client.h"

namespace osprey::python {

struct ConnectOptions {
  std::string config_path;            // the job's YAML
  std::vector<std::string> sets;      // "key=value" overrides, as the binaries take them
  std::string coordinator;            // "": the config's cluster.coordinator
  int requested_rank = -1;            // -1: the coordinator assigns one
  int register_timeout_ms = -1;       // -1: cluster.startup_timeout_ms
};

// What a worker reports at the end (proto WorkerReport's main fields).
struct FinalReport {
  int64_t steps = 0;
  uint64_t samples = 0;
  double train_seconds = 0;
  double final_loss = 0;
  double auc = -1;        // < 0: not evaluated
  double logloss = 0;
  double oracle_auc = 0;
  uint64_t eval_samples = 0;
};

class JobClient {
 public:
  // Loads the config, registers with the coordinator as a worker (blocks until every worker
  // joined), connects to every server and starts heartbeats. Errors: the config's
  // (InvalidArgument / NotFound), DeadlineExceeded when the coordinator did not answer.
  static StatusOr<std::unique_ptr<JobClient>> Connect(const ConnectOptions& options);
  ~JobClient();

  // Stops heartbeats and the client (outstanding tickets fail with Aborted). Idempotent.
  void Close();
  // FailedPrecondition when called in a forked child or after Close().
  Status CheckUsable() const;

  worker::Client* client() { return client_.get(); }
  const config::JobConfig& job() const { return job_; }
  int rank() const { return rank_; }
  int num_workers() const { return num_workers_; }

  // Progress the heartbeats carry (the launcher's progress line).
  void SetProgress(int64_t step, uint64_t samples, double loss);
  // Blocks until every live worker reached barrier `name`.
  Status Barrier(const std::string& name, int timeout_ms);
  // Sends this worker's final report (the launcher's final table).
  Status Report(const FinalReport& report);

 private:
  JobClient() = default;

  config::JobConfig job_;
  pid_t pid_ = 0;
  int rank_ = 0;
  int num_workers_ = 0;
  std::atomic<bool> closed_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> samples_{0};
  std::atomic<double> loss_{0};
  std::unique_ptr<coordinator::CoordinatorClient> coord_;
  std::unique_ptr<worker::Client> client_;
};

}  // namespace osprey::python
