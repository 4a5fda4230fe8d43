// Memory owners: DeviceBuffer, PinnedBuffer, SelectWorkspace, CountReader.
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {

int DeviceCount() {
  int count = 0;
  // No driver, no device and a driver too old all mean "no GPU here" to callers.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return 0;
  }
  return count;
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return std::move(b);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.data_, bytes));
  b.size_ = bytes;
  return std::move(b);  // explicit: StatusOr<T>(T) is not an implicit-move candidate before C++20
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // errors here have nobody to report to
}

StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return std::move(b);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMallocHost(&b.data_, bytes));
  b.size_ = bytes;
  return std::move(b);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);  // errors here have nobody to report to
}

size_t RecommendedCandidateCapacity(size_t n, uint64_t k_hi) {
  const size_t want = 2 * static_cast<size_t>(k_hi) + 65536;
  return want < n ? want : n;
}

SelectWorkspace::SelectWorkspace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SelectWorkspace::~SelectWorkspace() = default;

const uint32_t* SelectWorkspace::device_count() const { return &impl_->d_state()->final_count; }

StatusOr<std::unique_ptr<SelectWorkspace>> SelectWorkspace::Create(size_t max_n, size_t candidate_capacity,
                                                                   size_t max_samples) {
  if (max_n > UINT32_MAX || candidate_capacity > UINT32_MAX || max_samples > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("SelectWorkspace sizes must fit u32 (max_n " + std::to_string(max_n) + ")");
  }
  auto w = std::make_unique<Impl>();
  w->max_n = max_n;
  w->cand_capacity = candidate_capacity;
  w->max_samples = max_samples;
  int device = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&w->num_sms, cudaDevAttrMultiProcessorCount, device));
  OSPREY_ASSIGN_OR_RETURN(w->state, DeviceBuffer::Allocate(sizeof(DeviceState)));
  OSPREY_ASSIGN_OR_RETURN(w->hist, DeviceBuffer::Allocate(sizeof(uint32_t) * codec::kMaxDigitBins));
  // The histogram must start zeroed; the decide kernels re-zero it after every use.
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(w->hist.data(), 0, w->hist.size()));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(w->state.data(), 0, w->state.size()));
  OSPREY_ASSIGN_OR_RETURN(w->cand_idx, DeviceBuffer::Allocate(sizeof(uint32_t) * candidate_capacity));
  OSPREY_ASSIGN_OR_RETURN(w->cand_val, DeviceBuffer::Allocate(sizeof(float) * candidate_capacity));
  if (max_samples > 0) {
    OSPREY_ASSIGN_OR_RETURN(w->sample_keys, DeviceBuffer::Allocate(sizeof(uint32_t) * max_samples));
  }
  // The memsets above run on the legacy stream; callers may use non-blocking streams, which do not
  // wait for it. Creation is a setup step, so one device synchronization is cheap insurance.
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return std::unique_ptr<SelectWorkspace>(new SelectWorkspace(std::move(w)));
}

StatusOr<std::unique_ptr<CountReader>> CountReader::Create() {
  std::unique_ptr<CountReader> r(new CountReader());
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&r->host_), sizeof(uint32_t)));
  cudaEvent_t event;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  r->event_ = event;
  return std::move(r);
}

CountReader::~CountReader() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (host_) cudaFreeHost(host_);
}

Status CountReader::Start(const uint32_t* d_value, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_, d_value, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(event_), s));
  started_ = true;
  return Status::OK();
}

StatusOr<uint32_t> CountReader::Wait() {
  if (!started_) return FailedPrecondition("CountReader::Wait without Start");
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  started_ = false;
  return *host_;
}

}  // namespace osprey::cuda
