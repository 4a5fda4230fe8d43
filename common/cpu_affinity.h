// CPU lists ("0-3,8,10-11", the kernel's cpuset syntax) and pinning a process to one
// (cluster.server_cpus / cluster.worker_cpus, issue 17): servers on cores apart from a worker's
// pipeline threads, so neither preempts the other.
//
// Threading: PinProcessTo changes the calling thread's affinity, which every thread it starts
// afterwards inherits; mains call it first, before any thread (ZeroMQ's included) exists. Only
// *_main.cc files call it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace osprey {

// The CPUs of `list` (ascending, no duplicates); "" gives none. Errors: InvalidArgument naming
// the bad item ("'3-1' is not a range low-high", "'x' is not a CPU number", a CPU above 1023).
StatusOr<std::vector<int>> ParseCpuList(const std::string& list);
// The compact form: {0, 1, 2, 3, 8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs this process may run on now (sched_getaffinity).
std::vector<int> AllowedCpus();

// Restricts the process (the calling thread and the threads it starts later) to `cpus`.
// Errors: FailedPrecondition naming the CPUs this machine does not have or this process's cpuset
// leaves out (checked after the call: the kernel silently drops those); Internal when
// sched_setaffinity fails otherwise.
Status PinProcessTo(const std::vector<int>& cpus);
// ParseCpuList then PinProcessTo; "" pins nothing.
Status PinProcessToList(const std::string& list);

}  // namespace osprey
