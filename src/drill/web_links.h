// The chain's web links as drill stages: the exporter's /metrics, the health check's /status,
// Prometheus' alerts (/api/v1/alerts) and Alertmanager's (/api/v2/alerts). Each look is one GET.
// Thread-safety: see link.h (one thread per link).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drill/link.h"

namespace vigil::drill {

// The exporter follows the engine: `vigil_engine_info{node,instance_id}` names it and
// `vigil_engine_seq` the tick. The fault shows when the GPU's worst `vigil_gpu_health_status` is
// the engine's status for it, and — where the counters list them — `DCGM_EXP_GPU_HEALTH_STATUS`
// (health_watch ALL) agrees and, for an XID drill, `DCGM_FI_DEV_XID_ERRORS` holds the code.
std::unique_ptr<Link> NewExporterLink(std::string url);

// The health check's /status: `engine.instance_id` / `engine.node`, `seq`, and the GPU's
// `status` (the one the check acts on: UNKNOWN when its verdict is stale).
std::unique_ptr<Link> NewHealthcheckLink(std::string url);

// Prometheus: an alert firing whose labels name this node and GPU (`node`, `gpu`), every one of
// `alerts` when they are named. The way back: none of them firing.
std::unique_ptr<Link> NewPrometheusLink(std::string url, std::vector<std::string> alerts);

// Alertmanager: the same alerts active (or silenced: it still holds them), with their receivers.
std::unique_ptr<Link> NewAlertmanagerLink(std::string url, std::vector<std::string> alerts);

}  // namespace vigil::drill
