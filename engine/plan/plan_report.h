// A memory plan rendered for people (a table of bytes per device by category) and for programs
// (JSON with exact byte counts and each device's share), with the speed model's estimate when the
// devices are named GPU models. Both carry the same facts.
#pragma once

#include <string>

#include "model/model_desc.h"
#include "plan/memory_plan.h"
#include "plan/speed_model.h"

namespace tandem {

// Pretty-printed JSON; with_tensors adds one entry per tensor placement, speed a "speed_model"
// object.
std::string plan_to_json(const model_desc& desc, const memory_plan& p, bool with_tensors = false,
                         const speed_estimate* speed = nullptr);

// speed adds a closing section, labelled as a model.
std::string plan_to_text(const model_desc& desc, const memory_plan& p, const speed_estimate* speed = nullptr);

}  // namespace tandem
