// A floor under the stack size threads are created with, for the metrics exposer of GPU workers.
//
// civetweb (prometheus-cpp's HTTP server, Debian's libcivetweb 1.15) creates its threads with a
// fixed 100 KiB stack (pthread_attr_setstacksize(102400)). glibc puts the process's static TLS on
// every thread's stack and refuses a stack that cannot hold it (pthread_create: EINVAL, no
// syscall); a CUDA build of osprey-worker loads cuBLASLt (92 KiB of static TLS) and NCCL, so
// civetweb could start no thread and the worker's exposer failed ("null context when
// constructing CivetServer"). This definition, exported from the executable
// (--export-dynamic-symbol in worker/CMakeLists.txt), is found before libc's for every library of
// the process, and raises requests below kFloor to kFloor; larger requests pass unchanged.
// Thread-safety: the libc function is looked up once (a function-local static).
#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>
#include <cstddef>

namespace {
constexpr size_t kFloor = size_t{1} << 20;  // 1 MiB: the static TLS of the CUDA libraries and room to run
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) noexcept {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (real == nullptr) return ENOSYS;
  return real(attr, size < kFloor ? kFloor : size);
}
