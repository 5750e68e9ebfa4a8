// `tandem-model info FILE.gguf [--json]`: what a GGUF file holds. The report is built once as JSON;
// the text form is rendered from it, so both always carry the same facts.
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "gguf/gguf_reader.h"
#include "model/model_desc.h"
#include "plan/active_weights.h"
#include "progress.h"
#include "quant_mix.h"

namespace tandem {
namespace {

using json = nlohmann::ordered_json;

json value_json(const gguf_value& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, gguf_array>) {
          json a = json::array();
          for (const auto& item : x.items) a.push_back(value_json(item));
          return a;
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return static_cast<int>(x);  // not as characters
        } else {
          return x;
        }
      },
      v.v);
}

bool starts_with(std::string_view s, std::string_view head) { return s.substr(0, head.size()) == head; }

// The id-th token's text, when the vocabulary has it.
json token_text(const gguf_file& f, uint64_t id) {
  const gguf_value* toks = f.find("tokenizer.ggml.tokens");
  if (!toks || toks->type() != gguf_type::array) return nullptr;
  const auto& items = std::get<gguf_array>(toks->v).items;
  if (id >= items.size() || items[id].type() != gguf_type::string) return nullptr;
  return std::get<std::string>(items[id].v);
}

size_t array_size(const gguf_file& f, std::string_view key) {
  const gguf_value* v = f.find(key);
  return v && v->type() == gguf_type::array ? std::get<gguf_array>(v->v).items.size() : 0;
}

json tokenizer_json(const gguf_file& f) {
  if (!f.find("tokenizer.ggml.model")) return nullptr;
  json t;
  auto model = f.get_string("tokenizer.ggml.model");
  t["model"] = model ? json(*model) : json(nullptr);
  auto pre = f.get_string("tokenizer.ggml.pre");
  t["pre"] = pre ? json(*pre) : json(nullptr);
  t["n_tokens"] = array_size(f, "tokenizer.ggml.tokens");
  t["n_merges"] = array_size(f, "tokenizer.ggml.merges");
  for (const char* which : {"bos", "eos", "padding"}) {
    auto id = f.get_uint(std::string("tokenizer.ggml.") + which + "_token_id");
    t[std::string(which) + "_token_id"] = id ? json(*id) : json(nullptr);
    t[std::string(which) + "_token"] = id ? token_text(f, *id) : json(nullptr);
  }
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  t["add_bos_token"] = add_bos ? json(*add_bos) : json(nullptr);
  auto tmpl = f.get_string("tokenizer.chat_template");
  t["has_chat_template"] = tmpl.ok();
  t["chat_template_bytes"] = tmpl ? tmpl->size() : 0;
  return t;
}

json tensors_json(const gguf_file& f, uint64_t& n_params, json& by_type) {
  json tensors = json::array();
  std::map<std::string, std::array<uint64_t, 3>> per_type;  // tensors, bytes, params
  n_params = 0;
  for (const auto& t : f.tensors()) {
    json shape = json::array();
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.dims[d]);
    const std::string type(type_name(t.type));
    tensors.push_back({{"name", t.name}, {"type", type}, {"shape", shape},
                       {"bytes", t.n_bytes}, {"offset", t.offset}});
    auto& acc = per_type[type];
    acc[0] += 1;
    acc[1] += t.n_bytes;
    acc[2] += t.n_elements;
    n_params += t.n_elements;
  }
  by_type = json::array();
  for (const auto& [type, acc] : per_type)
    by_type.push_back({{"type", type}, {"tensors", acc[0]}, {"bytes", acc[1]}, {"params", acc[2]}});
  return tensors;
}

// A mixture-of-experts file's expert counts and sizes (null for dense models or files that do not
// bind): the experts' bytes, and the weight bytes a decode token reads (k of n experts).
json experts_json(const gguf_file& f) {
  auto d = bind_model(f);
  if (!d || !d->hp.moe()) return nullptr;
  const hparams& hp = d->hp;
  const active_weights a = active_per_token(*d);
  return {{"expert_count", hp.n_expert},
          {"expert_used_count", hp.n_expert_used},
          {"n_ff_exp", hp.n_ff_exp},
          {"n_ff_shexp", hp.n_ff_shexp},
          {"weights_norm", hp.expert_weights_norm},
          {"expert_bytes", routed_expert_bytes(*d)},
          {"active_bytes_per_token", a.bytes},
          {"active_params_per_token", a.params}};
}

json build_report(const std::string& path, const gguf_file& f) {
  json r;
  r["file"] = path;
  r["file_size"] = f.file_size();
  r["gguf_version"] = f.version();
  r["alignment"] = f.alignment();
  r["data_offset"] = f.data_offset();
  auto arch = f.get_string("general.architecture");
  r["architecture"] = arch ? json(*arch) : json(nullptr);
  auto name = f.get_string("general.name");
  r["name"] = name ? json(*name) : json(nullptr);
  auto ftype = f.get_uint("general.file_type");
  r["file_type"] = ftype ? json{{"id", *ftype}, {"name", file_type_name(static_cast<uint32_t>(*ftype))}}
                         : json(nullptr);
  json general = json::object(), hparams = json::object();
  const std::string prefix = arch ? *arch + "." : std::string("\x01");
  for (const auto& kv : f.metadata()) {
    if (starts_with(kv.key, "general.")) general[kv.key] = value_json(kv.value);
    else if (starts_with(kv.key, prefix)) hparams[kv.key] = value_json(kv.value);
  }
  r["general"] = general;
  r["hparams"] = hparams;
  r["tokenizer"] = tokenizer_json(f);
  uint64_t n_params = 0;
  json by_type;
  r["tensors"] = tensors_json(f, n_params, by_type);
  r["n_tensors"] = f.tensors().size();
  r["n_params"] = n_params;
  r["experts"] = experts_json(f);
  r["bytes_by_type"] = by_type;
  r["n_metadata_keys"] = f.metadata().size();
  return r;
}

std::string count_text(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

// Bad UTF-8 in a file's strings is replaced rather than thrown on: info must describe any file.
std::string dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// Text for one value: strings bare, floats short (%g; --json keeps full precision).
std::string text_of(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", j.get<double>());
    return buf;
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + text_of(j[i]);
    return s + "]";
  }
  return dump(j);
}

void print_tokenizer(const json& t) {
  std::printf("\ntokenizer\n");
  if (t.is_null()) {
    std::printf("  (none: no tokenizer.ggml.model)\n");
    return;
  }
  std::printf("  model %s, pre %s, %s tokens, %s merges\n", text_of(t["model"]).c_str(),
              text_of(t["pre"]).c_str(), t["n_tokens"].dump().c_str(), t["n_merges"].dump().c_str());
  for (const char* which : {"bos", "eos", "padding"}) {
    const json& id = t[std::string(which) + "_token_id"];
    const json& text = t[std::string(which) + "_token"];
    std::printf("  %-8s %s %s\n", which, id.is_null() ? "(not set)" : id.dump().c_str(),
                text.is_null() ? "" : text_of(text).c_str());
  }
  std::printf("  add_bos  %s\n", text_of(t["add_bos_token"]).c_str());
  if (t["has_chat_template"].get<bool>())
    std::printf("  chat template: yes (%s bytes)\n", t["chat_template_bytes"].dump().c_str());
  else
    std::printf("  chat template: no\n");
}

// The tensor table (hundreds of lines for a real model) only when asked for.
void print_text(const json& r, bool with_tensors) {
  const uint64_t size = r["file_size"].get<uint64_t>();
  std::printf("file          %s\n", r["file"].get<std::string>().c_str());
  std::printf("size          %s (%llu bytes), GGUF v%s, alignment %s\n", format_bytes(size).c_str(),
              static_cast<unsigned long long>(size), r["gguf_version"].dump().c_str(),
              r["alignment"].dump().c_str());
  std::printf("architecture  %s\n", text_of(r["architecture"]).c_str());
  std::printf("name          %s\n", text_of(r["name"]).c_str());
  const json& ft = r["file_type"];
  if (ft.is_null()) std::printf("file type     (general.file_type not set)\n");
  else std::printf("file type     %s (%s)\n", text_of(ft["name"]).c_str(), ft["id"].dump().c_str());
  std::printf("parameters    %s (%s) in %s tensors\n",
              count_text(r["n_params"].get<uint64_t>()).c_str(), r["n_params"].dump().c_str(),
              r["n_tensors"].dump().c_str());
  if (const json& e = r["experts"]; !e.is_null()) {
    const uint32_t shared = e["n_ff_shexp"].get<uint32_t>();
    std::printf("experts       %s of %s per layer, %s per token%s%s; %s of experts, %s read per token (%s params)\n",
                e["expert_count"].dump().c_str(), e["n_ff_exp"].dump().c_str(), e["expert_used_count"].dump().c_str(),
                e["weights_norm"].get<bool>() ? " (renormalised)" : "",
                shared ? (", shared expert of " + std::to_string(shared)).c_str() : "",
                format_bytes(e["expert_bytes"].get<uint64_t>()).c_str(),
                format_bytes(e["active_bytes_per_token"].get<uint64_t>()).c_str(),
                count_text(e["active_params_per_token"].get<uint64_t>()).c_str());
  }
  std::printf("\nhyperparameters\n");
  for (const auto& [k, v] : r["hparams"].items()) std::printf("  %-44s %s\n", k.c_str(), text_of(v).c_str());
  print_tokenizer(r["tokenizer"]);
  if (with_tensors) std::printf("\ntensors\n  %-36s %-6s %-24s %14s\n", "name", "type", "shape", "bytes");
  for (const auto& t : with_tensors ? r["tensors"] : json::array()) {
    std::string shape;
    for (const auto& d : t["shape"]) shape += (shape.empty() ? "" : " x ") + d.dump();
    std::printf("  %-36s %-6s %-24s %14s\n", t["name"].get<std::string>().c_str(),
                t["type"].get<std::string>().c_str(), shape.c_str(), t["bytes"].dump().c_str());
  }
  uint64_t total = 0;
  for (const auto& b : r["bytes_by_type"]) total += b["bytes"].get<uint64_t>();
  std::printf("\nbytes by type\n");
  for (const auto& b : r["bytes_by_type"]) {
    const uint64_t bytes = b["bytes"].get<uint64_t>();
    std::printf("  %-6s %5s tensors %14llu bytes %6.2f%%  %s params\n",
                b["type"].get<std::string>().c_str(), b["tensors"].dump().c_str(),
                static_cast<unsigned long long>(bytes), total ? 100.0 * bytes / total : 0.0,
                count_text(b["params"].get<uint64_t>()).c_str());
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a GGUF file's architecture, hyperparameters, "
                                         "tokenizer and bytes by type (--tensors: the tensor table)");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto tensors = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "GGUF file")->required();
  cmd->add_flag("--json", *as_json, "Print the report as one JSON object (always with the tensors)");
  cmd->add_flag("-t,--tensors", *tensors, "Also print the tensor table (name, type, shape, bytes)");
  cmd->callback([path, as_json, tensors] {
    auto file = gguf_file::open(*path);
    if (!file) fail(file.message());
    const json report = build_report(*path, *file);
    if (*as_json) std::printf("%s\n", dump(report, 2).c_str());
    else print_text(report, *tensors);
  });
}

}  // namespace tandem
