// A memory plan rendered for people (a table of bytes per device by category) and for programs
// (JSON with exact byte counts and each device's share). Both carry the same facts.
#pragma once

#include <string>

#include "model/model_desc.h"
#include "plan/memory_plan.h"

namespace tandem {

// Pretty-printed JSON; with_tensors adds one entry per tensor placement.
std::string plan_to_json(const model_desc& desc, const memory_plan& p, bool with_tensors = false);

std::string plan_to_text(const model_desc& desc, const memory_plan& p);

}  // namespace tandem
