// The NCCL communicator behind NcclHostGroup (host_group.h), shared by host_group.cc and
// host_ipc.cc. Private to worker/gpu.
#pragma once

#ifdef OSPREY_HAVE_NCCL
#include <nccl.h>
#endif

#include "worker/gpu/host_group.h"

namespace osprey::worker::gpu {

#ifdef OSPREY_HAVE_NCCL
struct NcclHostGroup::Comm {
  ncclComm_t comm = nullptr;
  ~Comm() {
    if (comm) ncclCommDestroy(comm);
  }
};
#else
struct NcclHostGroup::Comm {};
#endif

}  // namespace osprey::worker::gpu
