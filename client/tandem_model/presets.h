// Named model shapes for `tandem-model make`: an architecture plus llama.cpp hyperparameters,
// taken from the published configs of the models they imitate (tiny ones are for tests).
#pragma once

#include <string_view>
#include <vector>

#include "model/arch_spec.h"

namespace tandem {

struct model_preset {
  std::string_view name;         // "qwen3-8b"
  std::string_view arch;         // "qwen3"
  std::string_view description;  // shown by --help and the docs
  hparams hp;
};

const model_preset* find_preset(std::string_view name);
const std::vector<model_preset>& all_presets();

}  // namespace tandem
