// osprey::cuda_sparse on a device, against the CPU: DedupeFeatureKeys vs data::DedupeKeys (same key
// set, ascending on the GPU, every entry's row maps back to its own key), GatherRows / ScatterRows
// vs a host loop, and the argument errors. Skipped where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/codec/row_cast.h"
#include "common/placement.h"
#include "tests/testing/cuda_buffers.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/data/batch.h"
#include "worker/data/random.h"
#include "worker/data/zipf.h"

#define OSPREY_SPARSE_REQUIRE_GPU()                                                \
  do {                                                                             \
    if (::osprey::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

namespace osprey::cuda {
namespace {

using testing::Download;
using testing::Poisoned;
using testing::Upload;

enum class Ids { kZipf, kWide, kAllSame, kHighBitsOnly };

data::Batch MakeBatch(int size, int num_sparse, Ids kind, uint64_t seed) {
  data::Batch b;
  b.size = size;
  b.num_sparse = num_sparse;
  b.labels.assign(size, 0.0f);
  b.ids.resize(static_cast<size_t>(size) * num_sparse);
  data::Rng rng(seed);
  data::ZipfSampler zipf(1000, 1.2);  // heavy duplicates: the top ids repeat thousands of times
  for (uint64_t& id : b.ids) {
    switch (kind) {
      case Ids::kZipf: {
        uint64_t rank = 0;
        while (!zipf.TrySample(rng.NextUniform(), &rank)) {
        }
        id = rank;
        break;
      }
      case Ids::kWide:  // all 64 bits random: bits above 47 must be dropped
        id = rng.NextU64();
        break;
      case Ids::kAllSame:
        id = 7;
        break;
      case Ids::kHighBitsOnly:  // distinct raw ids that collide once bits 48.. are dropped
        id = (rng.NextU64() << 48) | 5;
        break;
    }
  }
  return b;
}

struct DedupeResult {
  std::vector<uint64_t> unique;
  std::vector<int32_t> row_index;
};

// Runs DedupeFeatureKeys on a side stream with a workspace sized for max_ids (>= the batch's ids).
DedupeResult RunGpu(const data::Batch& b, int max_ids) {
  const size_t n = b.ids.size();
  DeviceBuffer ids = Upload(b.ids);
  DeviceBuffer unique = Poisoned(sizeof(uint64_t) * n), rows = Poisoned(sizeof(int32_t) * n);
  DeviceBuffer count = Poisoned(sizeof(int32_t));
  const size_t ws_bytes = DedupeWorkspaceBytes(max_ids);
  EXPECT_GT(ws_bytes, 0u);
  DeviceBuffer ws = Poisoned(ws_bytes);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Status st = DedupeFeatureKeys(ids.as<uint64_t>(), b.size, b.num_sparse, unique.as<uint64_t>(),
                                      rows.as<int32_t>(), count.as<int32_t>(), ws.data(), ws_bytes, stream);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  DedupeResult r;
  const int32_t num_unique = Download<int32_t>(count.data(), 1)[0];
  EXPECT_GE(num_unique, 0);
  EXPECT_LE(static_cast<size_t>(num_unique), n);
  if (num_unique < 0 || static_cast<size_t>(num_unique) > n) return r;
  r.unique = Download<uint64_t>(unique.data(), num_unique);
  r.row_index = Download<int32_t>(rows.data(), n);
  return r;
}

void ExpectSameAsCpu(const data::Batch& b, const DedupeResult& gpu) {
  std::vector<uint64_t> cpu_unique;
  std::vector<int32_t> cpu_rows;
  data::DedupeKeys(b, &cpu_unique, &cpu_rows);
  ASSERT_EQ(gpu.unique.size(), cpu_unique.size());
  EXPECT_TRUE(std::is_sorted(gpu.unique.begin(), gpu.unique.end()));
  EXPECT_EQ(std::adjacent_find(gpu.unique.begin(), gpu.unique.end()), gpu.unique.end()) << "duplicate unique key";
  std::sort(cpu_unique.begin(), cpu_unique.end());
  EXPECT_EQ(gpu.unique, cpu_unique);
  ASSERT_EQ(gpu.row_index.size(), b.ids.size());
  size_t bad = 0;
  for (int s = 0; s < b.size; ++s) {
    for (int f = 0; f < b.num_sparse; ++f) {
      const size_t i = static_cast<size_t>(s) * b.num_sparse + f;
      const int32_t r = gpu.row_index[i];
      const bool ok =
          r >= 0 && static_cast<size_t>(r) < gpu.unique.size() && gpu.unique[r] == data::FeatureKey(f, b.ids[i]);
      if (!ok && bad++ < 5) ADD_FAILURE() << "entry " << i << " (sample " << s << ", feature " << f << "): row " << r;
    }
  }
  EXPECT_EQ(bad, 0u);
}

void ExpectMatchesCpu(const data::Batch& b, int max_ids) { ExpectSameAsCpu(b, RunGpu(b, max_ids)); }

TEST(GpuSparseDedupeTest, ZipfHeavyDuplicatesMatchCpu) {
  OSPREY_SPARSE_REQUIRE_GPU();
  ExpectMatchesCpu(MakeBatch(2048, 26, Ids::kZipf, 1), 2048 * 26);
  ExpectMatchesCpu(MakeBatch(16384, 26, Ids::kZipf, 2), 16384 * 26);
  ExpectMatchesCpu(MakeBatch(777, 3, Ids::kZipf, 3), 777 * 3);
}

TEST(GpuSparseDedupeTest, WideIdsDropBitsAbove47) {
  OSPREY_SPARSE_REQUIRE_GPU();
  ExpectMatchesCpu(MakeBatch(4096, 26, Ids::kWide, 4), 4096 * 26);
  const data::Batch collide = MakeBatch(1000, 26, Ids::kHighBitsOnly, 5);
  ExpectMatchesCpu(collide, 1000 * 26);
  EXPECT_EQ(RunGpu(collide, 1000 * 26).unique.size(), 26u);  // one key per feature
}

TEST(GpuSparseDedupeTest, SingleFeatureAndSingleSample) {
  OSPREY_SPARSE_REQUIRE_GPU();
  ExpectMatchesCpu(MakeBatch(5000, 1, Ids::kZipf, 6), 5000);
  ExpectMatchesCpu(MakeBatch(5000, 1, Ids::kWide, 7), 5000);
  ExpectMatchesCpu(MakeBatch(1, 26, Ids::kZipf, 8), 26);
  ExpectMatchesCpu(MakeBatch(1, 1, Ids::kWide, 9), 1);
  const DedupeResult same = RunGpu(MakeBatch(300, 1, Ids::kAllSame, 10), 300);
  ASSERT_EQ(same.unique.size(), 1u);
  EXPECT_EQ(same.unique[0], 7u);
}

TEST(GpuSparseDedupeTest, AllSixteenFeatureBits) {
  OSPREY_SPARSE_REQUIRE_GPU();
  ExpectMatchesCpu(MakeBatch(3, data::kMaxSparseFeatures, Ids::kWide, 11), 3 * data::kMaxSparseFeatures);
  ExpectMatchesCpu(MakeBatch(2, 40000, Ids::kAllSame, 12), 2 * 40000);
}

TEST(GpuSparseDedupeTest, OneWorkspaceServesSmallerBatches) {
  OSPREY_SPARSE_REQUIRE_GPU();
  for (int size : {16384, 2048, 33, 1}) ExpectMatchesCpu(MakeBatch(size, 26, Ids::kZipf, 20 + size), 16384 * 26);
}

// No allocation and no synchronization inside: the call can be captured into a CUDA graph once and
// replayed for every batch of the same shape, with new ids in the same buffer.
TEST(GpuSparseDedupeTest, CapturedGraphReplaysWithNewIds) {
  OSPREY_SPARSE_REQUIRE_GPU();
  const int size = 4096, num_sparse = 26, n = size * num_sparse;
  const data::Batch first = MakeBatch(size, num_sparse, Ids::kZipf, 40);
  const data::Batch second = MakeBatch(size, num_sparse, Ids::kWide, 41);
  DeviceBuffer ids = Upload(first.ids), unique = Poisoned(8 * n), rows = Poisoned(4 * n), count = Poisoned(4);
  const size_t ws_bytes = DedupeWorkspaceBytes(n);
  DeviceBuffer ws = Poisoned(ws_bytes);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st = DedupeFeatureKeys(ids.as<uint64_t>(), size, num_sparse, unique.as<uint64_t>(), rows.as<int32_t>(),
                                      count.as<int32_t>(), ws.data(), ws_bytes, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const data::Batch* b : {&first, &second}) {
    ASSERT_EQ(cudaMemcpyAsync(ids.data(), b->ids.data(), 8 * n, cudaMemcpyHostToDevice, stream), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    DedupeResult r;
    const int32_t num_unique = Download<int32_t>(count.data(), 1)[0];
    ASSERT_TRUE(num_unique > 0 && num_unique <= n) << num_unique;
    r.unique = Download<uint64_t>(unique.data(), num_unique);
    r.row_index = Download<int32_t>(rows.data(), n);
    ExpectSameAsCpu(*b, r);
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(GpuSparseDedupeTest, EmptyBatchSetsCountToZero) {
  OSPREY_SPARSE_REQUIRE_GPU();
  DeviceBuffer count = Poisoned(sizeof(int32_t));
  for (auto [batch, num_sparse] : {std::pair{0, 26}, std::pair{5, 0}, std::pair{0, 0}}) {
    ASSERT_EQ(cudaMemset(count.data(), 0xFF, sizeof(int32_t)), cudaSuccess);
    const Status st =
        DedupeFeatureKeys(nullptr, batch, num_sparse, nullptr, nullptr, count.as<int32_t>(), nullptr, 0, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(Download<int32_t>(count.data(), 1)[0], 0);
  }
}

TEST(GpuSparseDedupeTest, ArgumentErrors) {
  OSPREY_SPARSE_REQUIRE_GPU();
  const int n = 64 * 26;
  const size_t ws_bytes = DedupeWorkspaceBytes(n);
  DeviceBuffer ids = Upload(MakeBatch(64, 26, Ids::kZipf, 30).ids), unique = Poisoned(8 * n), rows = Poisoned(4 * n);
  DeviceBuffer count = Poisoned(4), ws = Poisoned(ws_bytes);
  auto run = [&](const uint64_t* i, int batch, int num_sparse, uint64_t* u, int32_t* r, int32_t* c, void* w,
                 size_t bytes) { return DedupeFeatureKeys(i, batch, num_sparse, u, r, c, w, bytes, nullptr); };
  auto* I = ids.as<uint64_t>();
  auto* U = unique.as<uint64_t>();
  auto* R = rows.as<int32_t>();
  auto* C = count.as<int32_t>();
  void* W = ws.data();
  struct Case {
    Status st;
    const char* needle;
  };
  const Case cases[] = {
      {run(I, -1, 26, U, R, C, W, ws_bytes), "batch"},
      {run(I, 64, -2, U, R, C, W, ws_bytes), "num_sparse"},
      {run(I, 1, data::kMaxSparseFeatures + 1, U, R, C, W, ws_bytes), "65536"},
      {run(I, 1 << 20, 1 << 12, U, R, C, W, ws_bytes), "2^31"},
      {run(I, 64, 26, U, R, nullptr, W, ws_bytes), "d_num_unique"},
      {run(nullptr, 64, 26, U, R, C, W, ws_bytes), "null"},
      {run(I, 64, 26, nullptr, R, C, W, ws_bytes), "null"},
      {run(I, 64, 26, U, nullptr, C, W, ws_bytes), "null"},
      {run(I, 64, 26, U, R, C, nullptr, ws_bytes), "null"},
      {run(I, 64, 26, U, R, C, W, ws_bytes / 2), "DedupeWorkspaceBytes"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.st.code(), StatusCode::kInvalidArgument) << c.st.ToString();
    EXPECT_NE(c.st.message().find(c.needle), std::string::npos) << c.st.ToString();
  }
  EXPECT_EQ(DedupeWorkspaceBytes(0), 0u);
  EXPECT_EQ(DedupeWorkspaceBytes(-3), 0u);
  EXPECT_LE(DedupeWorkspaceBytes(100), DedupeWorkspaceBytes(100000));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- GatherRows / ScatterRows -------------------------------------------------------------

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  data::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.NextNormal());
  return v;
}

// n distinct slots among table_rows, in random order.
std::vector<int32_t> DistinctSlots(int n, int table_rows, uint64_t seed) {
  std::vector<int32_t> all(table_rows);
  for (int i = 0; i < table_rows; ++i) all[i] = i;
  data::Rng rng(seed);
  for (int i = 0; i < n; ++i) std::swap(all[i], all[i + rng.NextU64() % (table_rows - i)]);
  all.resize(n);
  return all;
}

// offset_floats shifts both row arrays off 16-byte alignment (the scalar path even when dim % 4 == 0).
void CheckGatherScatter(int n, int dim, int table_rows, int offset_floats) {
  SCOPED_TRACE("n " + std::to_string(n) + " dim " + std::to_string(dim) + " offset " + std::to_string(offset_floats));
  const size_t row_elems = static_cast<size_t>(n) * dim, table_elems = static_cast<size_t>(table_rows) * dim;
  const std::vector<float> table = RandomFloats(table_elems, 1000 + dim), rows = RandomFloats(row_elems, 2000 + dim);
  const std::vector<int32_t> slots = DistinctSlots(n, table_rows, 3000 + n);
  std::vector<float> table_pad(offset_floats, 0.0f), rows_pad(offset_floats, 0.0f);
  table_pad.insert(table_pad.end(), table.begin(), table.end());
  rows_pad.insert(rows_pad.end(), rows.begin(), rows.end());
  DeviceBuffer d_table = Upload(table_pad), d_rows = Upload(rows_pad), d_slots = Upload(slots);
  DeviceBuffer d_out = Poisoned(sizeof(float) * (row_elems + offset_floats));
  float* t = d_table.as<float>() + offset_floats;
  float* out = d_out.as<float>() + offset_floats;

  ASSERT_TRUE(GatherRows(t, d_slots.as<int32_t>(), n, dim, out, nullptr).ok());
  std::vector<float> want(row_elems);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < dim; ++j)
      want[static_cast<size_t>(i) * dim + j] = table[static_cast<size_t>(slots[i]) * dim + j];
  }
  EXPECT_EQ(Download<float>(out, row_elems), want);

  ASSERT_TRUE(ScatterRows(d_rows.as<float>() + offset_floats, d_slots.as<int32_t>(), n, dim, t, nullptr).ok());
  std::vector<float> want_table = table;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < dim; ++j)
      want_table[static_cast<size_t>(slots[i]) * dim + j] = rows[static_cast<size_t>(i) * dim + j];
  }
  EXPECT_EQ(Download<float>(t, table_elems), want_table);  // rows not in slots unchanged
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// GroupKeysByServer after a dedupe: the keys must come out grouped by the host's ServerForKey in
// server order, stable within a server, with counts that match, and every entry's row must still
// be its own key.
void ExpectGroupedLikeHost(int batch, int num_sparse, int num_servers, uint64_t seed) {
  const data::Batch b = MakeBatch(batch, num_sparse, Ids::kZipf, seed);
  const DedupeResult sorted = RunGpu(b, batch * num_sparse);
  const int n = static_cast<int>(sorted.unique.size());
  const int num_ids = static_cast<int>(b.ids.size());
  DeviceBuffer keys = Upload(sorted.unique), rows = Upload(sorted.row_index);
  DeviceBuffer counts = Poisoned(sizeof(int32_t) * num_servers);
  const size_t ws_bytes = GroupByServerWorkspaceBytes(n);
  ASSERT_GT(ws_bytes, 0u);
  DeviceBuffer ws = Poisoned(ws_bytes);
  const uint32_t table = 3;
  Status st = GroupKeysByServer(table, num_servers, keys.as<uint64_t>(), n, rows.as<int32_t>(), num_ids,
                                counts.as<int32_t>(), ws.data(), ws_bytes, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint64_t> grouped = Download<uint64_t>(keys.data(), n);
  const std::vector<int32_t> row_index = Download<int32_t>(rows.data(), num_ids);
  const std::vector<int32_t> got_counts = Download<int32_t>(counts.data(), num_servers);
  // The host's order: stable partition of the ascending keys by server.
  std::vector<uint64_t> want;
  std::vector<int32_t> want_counts(num_servers, 0);
  for (int srv = 0; srv < num_servers; ++srv) {
    for (uint64_t k : sorted.unique) {
      if (ServerForKey(table, k, num_servers) == srv) {
        want.push_back(k);
        ++want_counts[srv];
      }
    }
  }
  EXPECT_EQ(grouped, want) << num_servers << " servers";
  EXPECT_EQ(got_counts, want_counts);
  size_t bad = 0;
  for (int i = 0; i < num_ids; ++i) {
    const int32_t r = row_index[i];
    const bool ok = r >= 0 && r < n && grouped[r] == sorted.unique[sorted.row_index[i]];
    if (!ok && bad++ < 5) ADD_FAILURE() << "entry " << i << ": row " << r;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(GpuSparseGroupTest, KeysGroupedByServerExactlyAsTheHostPlacesThem) {
  OSPREY_SPARSE_REQUIRE_GPU();
  ExpectGroupedLikeHost(4096, 26, 16, 11);
  ExpectGroupedLikeHost(1000, 3, 1, 12);
  ExpectGroupedLikeHost(2048, 26, 7, 13);
  ExpectGroupedLikeHost(512, 26, 300, 14);
}

TEST(GpuSparseGroupTest, ArgumentErrors) {
  OSPREY_SPARSE_REQUIRE_GPU();
  DeviceBuffer keys = Poisoned(64), counts = Poisoned(64), rows = Poisoned(64), ws = Poisoned(16);
  Status st = GroupKeysByServer(0, 0, keys.as<uint64_t>(), 4, rows.as<int32_t>(), 4, counts.as<int32_t>(), ws.data(),
                                1 << 20, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_servers 0"), std::string::npos) << st.ToString();
  st = GroupKeysByServer(0, 4, keys.as<uint64_t>(), 4, rows.as<int32_t>(), 4, counts.as<int32_t>(), ws.data(), 16,
                         nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GroupByServerWorkspaceBytes"), std::string::npos) << st.ToString();
  // No keys: only the counts are zeroed.
  st = GroupKeysByServer(0, 4, nullptr, 0, nullptr, 0, counts.as<int32_t>(), nullptr, 0, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Download<int32_t>(counts.data(), 4), std::vector<int32_t>(4, 0));
}

TEST(GpuSparseRowsTest, GatherAndScatterMatchHostLoop) {
  OSPREY_SPARSE_REQUIRE_GPU();
  for (int dim : {1, 3, 16, 64}) {
    for (int offset : {0, 1}) {
      CheckGatherScatter(1000, dim, 5000, offset);
      CheckGatherScatter(1, dim, 7, offset);
    }
  }
  CheckGatherScatter(200000, 16, 400000, 0);
}

TEST(GpuSparseRowsTest, EmptyIsANoOp) {
  OSPREY_SPARSE_REQUIRE_GPU();
  EXPECT_TRUE(GatherRows(nullptr, nullptr, 0, 16, nullptr, nullptr).ok());
  EXPECT_TRUE(ScatterRows(nullptr, nullptr, 0, 3, nullptr, nullptr).ok());
}

TEST(GpuSparseRowsTest, ArgumentErrors) {
  OSPREY_SPARSE_REQUIRE_GPU();
  DeviceBuffer table = Poisoned(4096), slots = Upload(std::vector<int32_t>{0, 1}), out = Poisoned(4096);
  const float* T = table.as<float>();
  const int32_t* S = slots.as<int32_t>();
  float* O = out.as<float>();
  const Status cases[] = {
      GatherRows(T, S, -1, 4, O, nullptr),
      GatherRows(T, S, 2, 0, O, nullptr),
      GatherRows(nullptr, S, 2, 4, O, nullptr),
      GatherRows(T, nullptr, 2, 4, O, nullptr),
      GatherRows(T, S, 2, 4, nullptr, nullptr),
      ScatterRows(O, S, -5, 4, table.as<float>(), nullptr),
      ScatterRows(O, S, 2, -1, table.as<float>(), nullptr),
      ScatterRows(nullptr, S, 2, 4, table.as<float>(), nullptr),
      ScatterRows(O, nullptr, 2, 4, table.as<float>(), nullptr),
      ScatterRows(O, S, 2, 4, nullptr, nullptr),
  };
  for (const Status& st : cases) EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The device's row cast is the host's bit for bit (codec::CastRowValues): every rounding tie and
// special value of the formats, and a run of random magnitudes long enough for many blocks.
TEST(GpuSparseRowCastTest, CastRowValuesMatchesTheHostCastBitForBit) {
  OSPREY_SPARSE_REQUIRE_GPU();
  std::vector<float> in = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65519.0f, 65520.0f, -1e9f, 3.4e38f, -3.4e38f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                           6e-8f, 3e-8f, 1e-40f, 1.00390625f, 1.01171875f, 1.0009765625f, 3.3895314e38f};
  data::Rng rng(7);
  for (int i = 0; i < 300000; ++i) {
    const double mag = std::ldexp(rng.NextUniform(), static_cast<int>(rng.NextU64() % 80) - 40);
    in.push_back(static_cast<float>((rng.NextU64() & 1) ? mag : -mag));
  }
  const int64_t n = static_cast<int64_t>(in.size());
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    std::vector<uint16_t> want(in.size());
    codec::CastRowValues(in.data(), in.size(), type, reinterpret_cast<uint8_t*>(want.data()));
    DeviceBuffer d_in = Upload(in), d_out = Poisoned(in.size() * sizeof(uint16_t));
    ASSERT_TRUE(CastRowValues(d_in.as<float>(), n, type, d_out.as<uint16_t>(), nullptr).ok());
    const std::vector<uint16_t> got = Download<uint16_t>(d_out.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << codec::ValueTypeName(type) << " of " << in[i] << " at " << i;
    }
  }
}

// Pulled 16-bit rows widened into their cache slots: the host's WidenRowValues then ScatterRows,
// bit for bit, for rows made by the host cast (as a server sends them).
TEST(GpuSparseRowCastTest, ScatterRowsWidenMatchesTheHostWidenAndScatter) {
  OSPREY_SPARSE_REQUIRE_GPU();
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    for (int dim : {1, 3, 16}) {
      const int n = 5000, table_rows = 9000;
      data::Rng rng(11 + dim);
      std::vector<float> src(static_cast<size_t>(n) * dim);
      for (float& v : src) v = static_cast<float>(rng.NextNormal() * 0.05);
      src[0] = 70000.0f;  // saturates in fp16
      std::vector<uint16_t> rows(src.size());
      codec::CastRowValues(src.data(), src.size(), type, reinterpret_cast<uint8_t*>(rows.data()));
      std::vector<int32_t> slots(n);
      std::vector<int32_t> all(table_rows);
      for (int i = 0; i < table_rows; ++i) all[i] = i;
      for (int i = 0; i < n; ++i) std::swap(all[i], all[i + rng.NextU64() % (table_rows - i)]);
      for (int i = 0; i < n; ++i) slots[i] = all[i];  // distinct slots
      std::vector<float> want(static_cast<size_t>(table_rows) * dim, -1.0f), widened(src.size());
      codec::WidenRowValues(reinterpret_cast<const uint8_t*>(rows.data()), rows.size(), type, widened.data());
      for (int i = 0; i < n; ++i) {
        std::copy(widened.begin() + static_cast<size_t>(i) * dim, widened.begin() + static_cast<size_t>(i + 1) * dim,
                  want.begin() + static_cast<size_t>(slots[i]) * dim);
      }
      DeviceBuffer d_rows = Upload(rows), d_slots = Upload(slots), d_table = Upload(std::vector<float>(want.size(), -1.0f));
      ASSERT_TRUE(ScatterRowsWiden(d_rows.as<uint16_t>(), type, d_slots.as<int32_t>(), n, dim, d_table.as<float>(),
                                   nullptr)
                      .ok());
      const std::vector<float> got = Download<float>(d_table.data(), want.size());
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
          << codec::ValueTypeName(type) << " dim " << dim;
    }
  }
}

TEST(GpuSparseRowCastTest, ArgumentErrors) {
  OSPREY_SPARSE_REQUIRE_GPU();
  DeviceBuffer in = Upload(std::vector<float>{1.0f, 2.0f}), out = Poisoned(4);
  const Status cases[] = {
      CastRowValues(in.as<float>(), -1, codec::ValueType::kBf16, out.as<uint16_t>(), nullptr),
      CastRowValues(in.as<float>(), 2, codec::ValueType::kFp32, out.as<uint16_t>(), nullptr),
      CastRowValues(nullptr, 2, codec::ValueType::kBf16, out.as<uint16_t>(), nullptr),
      CastRowValues(in.as<float>(), 2, codec::ValueType::kFp16, nullptr, nullptr),
  };
  for (const Status& st : cases) EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(CastRowValues(nullptr, 0, codec::ValueType::kBf16, nullptr, nullptr).ok());
  DeviceBuffer slots = Upload(std::vector<int32_t>{0, 1}), table = Poisoned(64);
  const uint16_t* R = reinterpret_cast<const uint16_t*>(out.as<uint16_t>());
  const Status widen[] = {
      ScatterRowsWiden(R, codec::ValueType::kBf16, slots.as<int32_t>(), -1, 1, table.as<float>(), nullptr),
      ScatterRowsWiden(R, codec::ValueType::kBf16, slots.as<int32_t>(), 2, 0, table.as<float>(), nullptr),
      ScatterRowsWiden(R, codec::ValueType::kFp32, slots.as<int32_t>(), 2, 1, table.as<float>(), nullptr),
      ScatterRowsWiden(nullptr, codec::ValueType::kFp16, slots.as<int32_t>(), 2, 1, table.as<float>(), nullptr),
      ScatterRowsWiden(R, codec::ValueType::kFp16, nullptr, 2, 1, table.as<float>(), nullptr),
      ScatterRowsWiden(R, codec::ValueType::kFp16, slots.as<int32_t>(), 2, 1, nullptr, nullptr),
  };
  for (const Status& st : widen) EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

}  // namespace
}  // namespace osprey::cuda
