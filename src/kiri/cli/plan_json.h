#pragma once
// kiri plan --json: the planner's layout, evaluation, model and cluster as JSON objects.
#include <nlohmann/json.hpp>

#include "kiri/plan/planner.h"

namespace kiri::cli {

nlohmann::json layout_json(const plan::Layout& l);
nlohmann::json evaluation_json(const plan::Evaluation& e);
nlohmann::json model_json(const plan::ModelSpec& m);
nlohmann::json cluster_json(const plan::ClusterSpec& c);

}  // namespace kiri::cli
