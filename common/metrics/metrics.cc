#include "common/metrics/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <sstream>

#include "common/mutex.h"

namespace osprey::metrics {
namespace {

std::vector<prometheus::ClientMetric::Label> ToLabels(const Labels& labels) {
  std::vector<prometheus::ClientMetric::Label> out;
  for (const auto& [k, v] : labels) out.push_back({k, v});
  return out;
}

prometheus::ClientMetric ToMetric(Kind kind, const Sample& s) {
  prometheus::ClientMetric m;
  m.label = ToLabels(s.labels);
  switch (kind) {
    case Kind::kCounter: m.counter.value = s.value; break;
    case Kind::kGauge: m.gauge.value = s.value; break;
    case Kind::kHistogram: {
      double cumulative = 0;
      for (size_t i = 0; i < s.buckets.size(); ++i) {
        cumulative += s.buckets[i];
        const double bound = i < s.bounds.size() ? s.bounds[i] : std::numeric_limits<double>::infinity();
        m.histogram.bucket.push_back({static_cast<uint64_t>(cumulative), bound});
      }
      m.histogram.sample_count = static_cast<uint64_t>(cumulative);
      m.histogram.sample_sum = s.value;
      break;
    }
  }
  return m;
}

prometheus::MetricType ToType(Kind kind) {
  switch (kind) {
    case Kind::kCounter: return prometheus::MetricType::Counter;
    case Kind::kGauge: return prometheus::MetricType::Gauge;
    case Kind::kHistogram: return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

// The families read at scrape time.
class CallbackCollectable : public prometheus::Collectable {
 public:
  struct Family {
    Kind kind;
    std::string name, help;
    std::function<std::vector<Sample>()> fn;
  };
  void Add(Family f) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    families_.push_back(std::move(f));
  }
  std::vector<prometheus::MetricFamily> Collect() const override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::vector<prometheus::MetricFamily> out;
    for (const Family& f : families_) {
      std::vector<Sample> samples = f.fn();
      if (samples.empty()) continue;
      prometheus::MetricFamily mf;
      mf.name = f.name;
      mf.help = f.help;
      mf.type = ToType(f.kind);
      for (const Sample& s : samples) mf.metric.push_back(ToMetric(f.kind, s));
      out.push_back(std::move(mf));
    }
    return out;
  }

 private:
  mutable Mutex mu_;
  std::vector<Family> families_ GUARDED_BY(mu_);
};

}  // namespace

void Counter::Inc(double v) const {
  if (c_ != nullptr) c_->Increment(v);
}
double Counter::Value() const { return c_ != nullptr ? c_->Value() : 0; }
void Gauge::Set(double v) const {
  if (g_ != nullptr) g_->Set(v);
}
void Histogram::Observe(double v) const {
  if (h_ != nullptr) h_->Observe(v);
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
          250e-3, 500e-3, 1, 2.5, 5, 10};
}

struct Registry::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<CallbackCollectable> callbacks = std::make_shared<CallbackCollectable>();
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

// prometheus::Registry's builders lock internally and return the existing family for a name
// registered again with the same help.
Counter Registry::AddCounter(const std::string& name, const std::string& help, const Labels& labels) {
  auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(*impl_->registry);
  return Counter(&family.Add(labels));
}

Gauge Registry::AddGauge(const std::string& name, const std::string& help, const Labels& labels) {
  auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(*impl_->registry);
  return Gauge(&family.Add(labels));
}

Histogram Registry::AddHistogram(const std::string& name, const std::string& help,
                                 const Labels& labels, const std::vector<double>& bounds) {
  auto& family = prometheus::BuildHistogram().Name(name).Help(help).Register(*impl_->registry);
  return Histogram(&family.Add(labels, bounds));
}

void Registry::AddCallback(Kind kind, const std::string& name, const std::string& help,
                           std::function<std::vector<Sample>()> fn) {
  impl_->callbacks->Add({kind, name, help, std::move(fn)});
}

void Registry::AddValue(Kind kind, const std::string& name, const std::string& help,
                        std::function<double()> fn) {
  AddCallback(kind, name, help, [fn = std::move(fn)] {
    Sample s;
    s.value = fn();
    return std::vector<Sample>{s};
  });
}

std::string Registry::Serialize() const {
  std::vector<prometheus::MetricFamily> all = impl_->registry->Collect();
  std::vector<prometheus::MetricFamily> cb = impl_->callbacks->Collect();
  all.insert(all.end(), cb.begin(), cb.end());
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, all);
  return out.str();
}

struct Exposer::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
};

StatusOr<std::unique_ptr<Exposer>> Exposer::Start(const ExposerOptions& options, Registry* registry) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("metrics port " + std::to_string(options.port) + " is not in 0..65535");
  }
  const std::string where = options.bind_address + ":" + std::to_string(options.port);
  std::unique_ptr<Exposer> e(new Exposer());
  e->impl_ = std::make_unique<Impl>();
  try {
    // One thread: a scrape every few seconds needs no more.
    e->impl_->exposer = std::make_unique<prometheus::Exposer>(where, 1);
  } catch (const std::exception& ex) {
    return Unavailable("metrics exposer cannot listen on " + where + ": " + ex.what());
  }
  std::vector<int> ports = e->impl_->exposer->GetListeningPorts();
  if (ports.empty()) return Unavailable("metrics exposer on " + where + " has no listening port");
  e->impl_->exposer->RegisterCollectable(registry->impl_->registry);
  e->impl_->exposer->RegisterCollectable(registry->impl_->callbacks);
  e->address_ = options.bind_address;
  e->port_ = ports.front();
  return e;
}

Exposer::~Exposer() = default;

std::string Exposer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace osprey::metrics
