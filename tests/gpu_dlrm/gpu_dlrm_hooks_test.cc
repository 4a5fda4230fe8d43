// GpuDlrm's BackwardHooks: the order and arguments of the calls, and that the range each call
// announces really is final once an event recorded in the hook has completed.
//
// The second is checked by holding the stream right behind each hook's event: the hook also
// enqueues a host function that blocks until the test opens its gate. The test waits for the
// event, copies the announced range on a stream of its own while the compute stream is held (so
// nothing enqueued after the hook can have run), opens the gate, and at the end compares each copy
// with the final result bit for bit. The outputs start as NaN, so a hook that comes before its
// gradients are enqueued shows up as a NaN copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <thread>

#include "tests/gpu_dlrm/gpu_dlrm_test_util.h"

namespace osprey::cuda {
namespace {

using testing::KaggleConfig;
using testing::MakeDlrmConfig;

using testing::LayerSpec;
using testing::Problem;

constexpr size_t kRows = std::numeric_limits<size_t>::max();  // a rows_ready call in a sequence


// Top layers last to first, rows, bottom layers last to first: each layer's weight offset.
std::vector<size_t> ExpectedSequence(const models::DlrmConfig& config) {
  const std::vector<LayerSpec> layers = testing::DlrmLayers(config);
  const size_t num_bottom = config.bottom_mlp.size();
  std::vector<size_t> seq;
  for (size_t l = layers.size(); l-- > num_bottom;) seq.push_back(layers[l].weight);
  seq.push_back(kRows);
  for (size_t l = num_bottom; l-- > 0;) seq.push_back(layers[l].weight);
  return seq;
}

BackwardHooks Recorder(std::vector<size_t>* calls) {
  BackwardHooks hooks;
  hooks.dense_ready = [calls](size_t from) { calls->push_back(from); };
  hooks.rows_ready = [calls] { calls->push_back(kRows); };
  return hooks;
}

TEST(GpuDlrmHooksTest, CallsFollowTheLayoutAndLeaveResultsUnchanged) {
  OSPREY_DLRM_REQUIRE_GPU();
  const models::DlrmConfig configs[] = {
      models::DlrmConfig(),
      MakeDlrmConfig(13, 26, 16, {512, 256, 64, 16}, {512, 256, 1}),
      MakeDlrmConfig(5, 3, 5, {7, 5}, {9, 4, 1}),
      MakeDlrmConfig(0, 5, 4, {6, 4}, {8, 1}),  // bottom layer 0 has no weights: its W offset equals b's
      MakeDlrmConfig(13, 26, 8, {8}, {1}),
  };
  for (const models::DlrmConfig& config : configs) {
    for (MlpPrecision precision : {MlpPrecision::kFp32, MlpPrecision::kBf16}) {
      SCOPED_TRACE(::testing::Message() << "bottom layers " << config.bottom_mlp.size() << " top layers "
                                        << config.top_mlp.size() << " " << MlpPrecisionName(precision));
      auto gpu = testing::MakeGpuOrFail(config, 64, precision);
      ASSERT_NE(gpu, nullptr);
      const bool fp32 = precision == MlpPrecision::kFp32;
      const Problem p = testing::MakeProblemOrFail(config, 64, testing::MakeOptions(3, fp32 ? 1e-4 : 0));
      std::vector<size_t> calls;
      const BackwardHooks hooks = Recorder(&calls);
      testing::Stream stream;
      const testing::Outputs out = testing::RunGpu(gpu.get(), p, stream.get(), &hooks);
      const std::vector<size_t> expected = ExpectedSequence(config);
      EXPECT_EQ(calls, expected);
      // The contract, spelled out: `from` strictly decreasing to 0, rows_ready once, in between.
      ASSERT_EQ(std::count(calls.begin(), calls.end(), kRows), 1);
      const auto rows = std::find(calls.begin(), calls.end(), kRows);
      EXPECT_EQ(rows - calls.begin(), static_cast<std::ptrdiff_t>(config.top_mlp.size()));
      std::vector<size_t> dense(calls.begin(), rows);
      dense.insert(dense.end(), rows + 1, calls.end());
      for (size_t i = 1; i < dense.size(); ++i) EXPECT_LT(dense[i], dense[i - 1]);
      EXPECT_EQ(dense.back(), 0u);
      if (fp32) testing::ExpectMatchesCpu(p, out, testing::RunCpu(p), testing::kFp32Tolerance);
    }
  }
}

TEST(GpuDlrmHooksTest, EmptyBatchCallsRowsThenDenseZero) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = testing::MakeGpuOrFail(models::DlrmConfig(), 8, MlpPrecision::kTf32);
  ASSERT_NE(gpu, nullptr);
  const size_t row_floats = 10 * 16;
  DeviceBuffer dense_grad = testing::PoisonedFloats(gpu->num_dense_params());
  DeviceBuffer row_grad = testing::PoisonedFloats(row_floats), loss = testing::PoisonedFloats(1);
  std::vector<size_t> calls;
  const BackwardHooks hooks = Recorder(&calls);
  ASSERT_TRUE(gpu->ForwardBackward(nullptr, row_grad.as<float>(), 10, nullptr, nullptr, nullptr, 0,
                                   dense_grad.as<float>(), row_grad.as<float>(), nullptr, loss.as<float>(), nullptr,
                                   &hooks)
                  .ok());
  EXPECT_EQ(calls, (std::vector<size_t>{kRows, 0}));
  // Hooks with only one function set, and no hooks at all, are fine too.
  BackwardHooks rows_only;
  int rows_calls = 0;
  rows_only.rows_ready = [&rows_calls] { ++rows_calls; };
  ASSERT_TRUE(gpu->ForwardBackward(nullptr, row_grad.as<float>(), 10, nullptr, nullptr, nullptr, 0,
                                   dense_grad.as<float>(), row_grad.as<float>(), nullptr, loss.as<float>(), nullptr,
                                   &rows_only)
                  .ok());
  EXPECT_EQ(rows_calls, 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Host functions that hold a stream until the test opens them. Opening every gate and draining
// the stream on destruction means a failing test cannot leave the device waiting on the host.
class Gates {
 public:
  explicit Gates(cudaStream_t stream) : stream_(stream) {}
  ~Gates() {
    for (auto& gate : gates_) gate.store(true);
    (void)cudaStreamSynchronize(stream_);
  }
  Gates(const Gates&) = delete;
  Gates& operator=(const Gates&) = delete;

  // Enqueues a closed gate on the stream; returns its index.
  size_t Enqueue() {
    gates_.emplace_back(false);
    EXPECT_EQ(cudaLaunchHostFunc(stream_, &Gates::Wait, &gates_.back()), cudaSuccess);
    return gates_.size() - 1;
  }
  void Open(size_t i) { gates_[i].store(true); }

 private:
  static void CUDART_CB Wait(void* arg) {
    const auto* open = static_cast<const std::atomic<bool>*>(arg);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // never hang CI
    while (!open->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  cudaStream_t stream_;
  std::deque<std::atomic<bool>> gates_;  // a deque: elements never move, the device holds pointers
};

struct Mark {
  size_t from = 0;  // kRows: rows_ready
  cudaEvent_t event = nullptr;
  size_t gate = 0;
};

TEST(GpuDlrmHooksTest, AnnouncedRangesAreFinalAtTheHooksEvent) {
  OSPREY_DLRM_REQUIRE_GPU();
  const models::DlrmConfig config = MakeDlrmConfig(13, 26, 16, {512, 256, 64, 16}, {512, 256, 1});
  const Problem p = testing::MakeProblemOrFail(config, 512, testing::MakeOptions(7, 0));
  const size_t num_params = p.params.size(), row_floats = p.rows.size();
  for (MlpPrecision precision : {MlpPrecision::kTf32, MlpPrecision::kBf16}) {
    SCOPED_TRACE(MlpPrecisionName(precision));
    auto gpu = testing::MakeGpuOrFail(config, 512, precision);
    ASSERT_NE(gpu, nullptr);
    DeviceBuffer params = testing::Upload(p.params), rows = testing::Upload(p.rows);
    DeviceBuffer index = testing::Upload(p.row_index), dense = testing::Upload(p.batch.dense);
    DeviceBuffer labels = testing::Upload(p.batch.labels);
    DeviceBuffer dense_grad = testing::PoisonedFloats(num_params), row_grad = testing::PoisonedFloats(row_floats);
    DeviceBuffer probs = testing::PoisonedFloats(512), loss = testing::PoisonedFloats(1);
    testing::Stream stream, side;
    auto run = [&](const BackwardHooks* hooks) {
      return gpu->ForwardBackward(params.as<float>(), rows.as<float>(), p.num_rows(), index.as<int32_t>(),
                                  dense.as<float>(), labels.as<float>(), 512, dense_grad.as<float>(),
                                  row_grad.as<float>(), probs.as<float>(), loss.as<float>(), stream.get(), hooks);
    };
    // Warm-up: the first launch of a kernel (ours or cuBLAS's) may load its module, which can wait
    // for the whole device, and so for a held stream. Then the outputs go back to NaN.
    ASSERT_TRUE(run(nullptr).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaMemset(dense_grad.data(), 0xFF, dense_grad.size()), cudaSuccess);
    ASSERT_EQ(cudaMemset(row_grad.data(), 0xFF, row_grad.size()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // One copy per hook, allocated up front: nothing that might synchronize runs while held.
    const size_t num_marks = config.top_mlp.size() + 1 + config.bottom_mlp.size();
    std::vector<DeviceBuffer> copies;
    for (size_t k = 0; k < num_marks; ++k) copies.push_back(testing::PoisonedFloats(std::max(num_params, row_floats)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<Mark> marks;
    {
      Gates gates(stream.get());
      auto mark = [&](size_t from) {
        Mark m;
        m.from = from;
        EXPECT_EQ(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming), cudaSuccess);
        EXPECT_EQ(cudaEventRecord(m.event, stream.get()), cudaSuccess);
        m.gate = gates.Enqueue();
        marks.push_back(m);
      };
      BackwardHooks hooks;
      hooks.dense_ready = mark;
      hooks.rows_ready = [&mark] { mark(kRows); };
      const Status st = run(&hooks);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(marks.size(), num_marks);
      for (size_t k = 0; k < num_marks; ++k) {
        const Mark& m = marks[k];
        ASSERT_EQ(cudaEventSynchronize(m.event), cudaSuccess);
        // The whole dense vector (the part announced and the part still NaN), or the rows.
        const DeviceBuffer& src = m.from == kRows ? row_grad : dense_grad;
        const size_t n = m.from == kRows ? row_floats : num_params;
        ASSERT_EQ(cudaMemcpyAsync(copies[k].data(), src.data(), sizeof(float) * n, cudaMemcpyDeviceToDevice,
                                  side.get()),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(side.get()), cudaSuccess);
        gates.Open(m.gate);
      }
    }  // all gates open, the compute stream drained
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    const std::vector<float> final_dense = testing::Download<float>(dense_grad.data(), num_params);
    const std::vector<float> final_rows = testing::Download<float>(row_grad.data(), row_floats);
    for (size_t i = 0; i < final_dense.size(); ++i) ASSERT_TRUE(std::isfinite(final_dense[i])) << i;
    for (size_t k = 0; k < marks.size(); ++k) {
      const Mark& m = marks[k];
      if (m.from == kRows) {
        const std::vector<float> at_hook = testing::Download<float>(copies[k].data(), row_floats);
        EXPECT_EQ(std::memcmp(at_hook.data(), final_rows.data(), sizeof(float) * row_floats), 0)
            << "row_grad not final at rows_ready's event";
        continue;
      }
      const std::vector<float> at_hook = testing::Download<float>(copies[k].data(), num_params);
      EXPECT_EQ(std::memcmp(at_hook.data() + m.from, final_dense.data() + m.from,
                            sizeof(float) * (num_params - m.from)),
                0)
          << "dense_grad[" << m.from << ", " << num_params << ") not final at dense_ready(" << m.from << ")'s event";
      // The gate held the stream: the bottom MLP's gradients, enqueued after every top hook, were
      // still NaN. Without that the comparison above would prove nothing.
      if (k == 0) {
        const size_t bottom_end = testing::DlrmLayers(config)[config.bottom_mlp.size()].weight;
        size_t nan = 0;
        for (size_t i = 0; i < bottom_end; ++i) nan += std::isnan(at_hook[i]) ? 1 : 0;
        EXPECT_EQ(nan, bottom_end) << "the stream ran on past the first hook";
      }
    }
    for (const Mark& m : marks) EXPECT_EQ(cudaEventDestroy(m.event), cudaSuccess);
  }
}

}  // namespace
}  // namespace osprey::cuda
