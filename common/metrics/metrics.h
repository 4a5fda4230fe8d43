// Metrics: the narrow interface every binary uses to export Prometheus metrics, so that nothing
// outside common/metrics/ includes prometheus-cpp.
//
//   metrics::Registry reg;
//   metrics::Counter pushes = reg.AddCounter("osprey_server_pushes_total", "Pushes.", {{"table", "emb"}});
//   pushes.Inc();                      // hot path: one relaxed atomic add, no lock
//   reg.AddCallback(metrics::Kind::kGauge, "osprey_server_rows", "Rows held.", [&] { ... });
//   auto exposer = metrics::Exposer::Start({"127.0.0.1", 0}, &reg);  // GET /metrics
//
// Handles (Counter, Gauge, Histogram) are small values resolved once (per table, per op) and kept
// by the caller; a default-constructed handle does nothing, so code can keep its handles
// unconditionally and a binary with metrics off pays a null check per update.
//
// Callbacks export what the code already counts (ServerStats, a trainer's progress, the
// coordinator's state) instead of counting it twice: they run on the exposer's thread at scrape
// time and must be thread-safe and cheap (no lock held across a training step).
//
// Names follow Prometheus conventions: `_total` counters, `_seconds` and `_bytes` units.
// Threading: Add* and AddCallback may be called from any thread (they lock); handle updates
// from any thread. The Registry must outlive its handles and the Exposer that serves it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace osprey::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  Counter() = default;
  void Inc(double v = 1) const;
  double Value() const;  // 0 for a null handle

 private:
  friend class Registry;
  explicit Counter(prometheus::Counter* c) : c_(c) {}
  prometheus::Counter* c_ = nullptr;
};

class Gauge {
 public:
  Gauge() = default;
  void Set(double v) const;

 private:
  friend class Registry;
  explicit Gauge(prometheus::Gauge* g) : g_(g) {}
  prometheus::Gauge* g_ = nullptr;
};

class Histogram {
 public:
  Histogram() = default;
  void Observe(double v) const;

 private:
  friend class Registry;
  explicit Histogram(prometheus::Histogram* h) : h_(h) {}
  prometheus::Histogram* h_ = nullptr;
};

enum class Kind { kCounter, kGauge, kHistogram };

// One sample of a callback family. For kHistogram: `bounds` are the finite upper bounds,
// `buckets` the per-bucket (non-cumulative) counts with one more entry for +Inf, `value` the sum.
struct Sample {
  Labels labels;
  double value = 0;
  std::vector<double> bounds;
  std::vector<double> buckets;
};

// Latency buckets from 50 us to 10 s (seconds).
std::vector<double> LatencyBuckets();

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The same name with other labels adds a child to the family; help and kind must agree.
  Counter AddCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge AddGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram AddHistogram(const std::string& name, const std::string& help, const Labels& labels,
                         const std::vector<double>& bounds);
  // A family read at scrape time: `fn` returns its samples (empty: the family is left out).
  void AddCallback(Kind kind, const std::string& name, const std::string& help,
                   std::function<std::vector<Sample>()> fn);
  // Shorthand for one unlabelled sample.
  void AddValue(Kind kind, const std::string& name, const std::string& help,
                std::function<double()> fn);

  // The text exposition of everything (what GET /metrics returns); for tests and tools.
  std::string Serialize() const;

 private:
  friend class Exposer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ExposerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: any free port
};

// Serves GET /metrics for one registry over HTTP (prometheus-cpp's pull exposer, civetweb).
class Exposer {
 public:
  // Binds and starts serving. Unavailable naming the address when it cannot bind.
  static StatusOr<std::unique_ptr<Exposer>> Start(const ExposerOptions& options, Registry* registry);
  ~Exposer();
  int port() const { return port_; }
  // "http://ADDRESS:PORT/metrics".
  std::string url() const;

 private:
  struct Impl;
  Exposer() = default;
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int port_ = 0;
};

}  // namespace osprey::metrics
