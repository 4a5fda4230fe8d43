// CheckTransportAtStart: what every binary (osprey-coordinator, -server, -worker, osprey launch)
// runs right after loading its config, before it connects anywhere. OK unless
// cluster.transport is rdma and this build or this machine cannot do it; then a
// FailedPrecondition whose one-line message names what was looked for and what was found, and the
// binary exits 2 (a config / usage error).
//
// Built in every configuration: without libibverbs/librdmacm (OSPREY_HAVE_RDMA off) it says the
// build has no RDMA; with them it queries the real stack (real_verbs.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/config/cluster_config.h"
#include "common/status.h"

namespace osprey::rdma {

Status CheckTransportAtStart(const config::PsConfig& c);

// `osprey doctor`'s RDMA rows (label, value): the transport, each device's ports (state, link
// layer, MTU, GIDs) as libibverbs reports them, and whether device memory could be registered.
std::vector<std::pair<std::string, std::string>> RdmaDoctorRows();

}  // namespace osprey::rdma
