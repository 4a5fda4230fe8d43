// The `metrics` section of a job config, and the launcher's list of metrics endpoints.
#include <gtest/gtest.h>

#include "job/job_config.h"
#include "tests/testing/test_env.h"
#include "tools/metrics_endpoints.h"

namespace osprey {
namespace {

std::string LocalYaml() { return testing::SourceDir() + "/configs/local.yaml"; }

TEST(MetricsConfigTest, OffByDefaultAndSettable) {
  auto job = config::LoadJobConfig(LocalYaml());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->metrics.enabled());
  EXPECT_EQ(job->metrics.bind, "127.0.0.1");
  job = config::LoadJobConfig(LocalYaml(), {"metrics.port=0", "metrics.bind=0.0.0.0"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->metrics.enabled());
  EXPECT_EQ(job->metrics.port, 0);
  EXPECT_EQ(job->metrics.bind, "0.0.0.0");
  EXPECT_EQ(job->metrics.single_worker_samples_per_sec, 0);
  EXPECT_EQ(job->metrics.peak_flops_per_sec, 0);
  job = config::LoadJobConfig(LocalYaml(), {"metrics.single_worker_samples_per_sec=81000",
                                            "metrics.peak_flops_per_sec=9.89e14"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metrics.single_worker_samples_per_sec, 81000);
  EXPECT_EQ(job->metrics.peak_flops_per_sec, 9.89e14);
}

TEST(MetricsConfigTest, BadValuesNameTheKey) {
  for (const char* bad : {"metrics.port=70000", "metrics.port=-2", "metrics.bind=''",
                          "metrics.peak_flops_per_sec=-1", "metrics.single_worker_samples_per_sec=x"}) {
    auto job = config::LoadJobConfig(LocalYaml(), {bad});
    ASSERT_FALSE(job.ok()) << bad;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(job.status().message().find("metrics."), std::string::npos) << job.status().ToString();
  }
}

TEST(MetricsEndpointsTest, ListedOnlyOnceEveryNodeRegisteredOne) {
  proto::ClusterState st;
  st.set_num_servers(1);
  st.set_num_workers(1);
  EXPECT_EQ(tools::MetricsEndpointsText(st), "");  // no coordinator URL yet
  st.set_metrics_endpoint("http://127.0.0.1:1/metrics");
  proto::NodeState* s = st.add_nodes();
  s->set_role(proto::ROLE_SERVER);
  s->set_rank(0);
  s->set_metrics_endpoint("http://127.0.0.1:2/metrics");
  EXPECT_EQ(tools::MetricsEndpointsText(st), "");  // the worker has not registered
  proto::NodeState* w = st.add_nodes();
  w->set_role(proto::ROLE_WORKER);
  w->set_rank(0);
  EXPECT_EQ(tools::MetricsEndpointsText(st), "");  // registered without metrics
  w->set_metrics_endpoint("http://127.0.0.1:3/metrics");
  EXPECT_EQ(tools::MetricsEndpointsText(st),
            "coordinator http://127.0.0.1:1/metrics\nserver-0 http://127.0.0.1:2/metrics\n"
            "worker-0 http://127.0.0.1:3/metrics\n");
}

}  // namespace
}  // namespace osprey
