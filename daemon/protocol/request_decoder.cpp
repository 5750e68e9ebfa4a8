// decode_request: msgpack body → typed request. Every failure becomes a wire_error naming the field;
// msgpack-c's own limits (from the body size and a depth cap) bound what it may allocate.
#include <msgpack.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <set>
#include <map>

#include "protocol/request.h"

namespace tandem::proto {
namespace {

// Thrown only inside this file and always caught by decode_request.
struct field_error {
  error_code code;
  std::string message;
};

[[noreturn]] void fail(std::string msg, error_code code = error_code::bad_request) {
  throw field_error{code, std::move(msg)};
}

std::string_view type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "boolean";
    case msgpack::type::POSITIVE_INTEGER: return "integer";
    case msgpack::type::NEGATIVE_INTEGER: return "negative integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "string";
    case msgpack::type::BIN: return "binary";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

// Reads the fields of one msgpack map, each at most once, and rejects leftovers.
class field_reader {
 public:
  field_reader(const msgpack::object& map, std::string where) : where_(std::move(where)) {
    if (map.type != msgpack::type::MAP) fail(where_ + " must be a map, got " + std::string(type_name(map)));
    for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& kv = map.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) fail(where_ + ": keys must be strings");
      std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
      if (!fields_.emplace(key, &kv.val).second) fail(where_ + ": duplicate key '" + key + "'");
    }
  }

  const msgpack::object* find(const std::string& key) {
    auto it = fields_.find(key);
    if (it == fields_.end()) return nullptr;
    used_.insert(key);
    return it->second;
  }
  const msgpack::object& need(const std::string& key) {
    const auto* o = find(key);
    if (!o) fail(where_ + ": missing field '" + key + "'");
    return *o;
  }

  std::string str(const std::string& key, std::size_t max_len) { return as_str(need(key), key, max_len); }
  std::optional<std::string> opt_str(const std::string& key, std::size_t max_len) {
    const auto* o = find(key);
    if (!o) return std::nullopt;
    return as_str(*o, key, max_len);
  }
  std::string as_str(const msgpack::object& o, const std::string& key, std::size_t max_len) {
    if (o.type != msgpack::type::STR) wrong_type(key, "a string", o);
    if (o.via.str.size > max_len)
      fail(where_ + ": field '" + key + "' is longer than " + std::to_string(max_len) + " bytes");
    return std::string(o.via.str.ptr, o.via.str.size);
  }

  // Unsigned integer in [lo, hi]; `key` absent → nullopt.
  std::optional<std::uint64_t> opt_uint(const std::string& key, std::uint64_t lo, std::uint64_t hi) {
    const auto* o = find(key);
    if (!o) return std::nullopt;
    return as_uint(*o, key, lo, hi);
  }
  std::uint64_t as_uint(const msgpack::object& o, const std::string& key, std::uint64_t lo,
                        std::uint64_t hi) {
    if (o.type == msgpack::type::NEGATIVE_INTEGER) fail(where_ + ": field '" + key + "' must not be negative");
    if (o.type != msgpack::type::POSITIVE_INTEGER) wrong_type(key, "an unsigned integer", o);
    if (o.via.u64 < lo || o.via.u64 > hi)
      fail(where_ + ": field '" + key + "' = " + std::to_string(o.via.u64) + " is outside [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return o.via.u64;
  }

  // Finite number (integer or float) in [lo, hi].
  std::optional<double> opt_num(const std::string& key, double lo, double hi) {
    const auto* o = find(key);
    if (!o) return std::nullopt;
    double v = 0;
    switch (o->type) {
      case msgpack::type::POSITIVE_INTEGER: v = static_cast<double>(o->via.u64); break;
      case msgpack::type::NEGATIVE_INTEGER: v = static_cast<double>(o->via.i64); break;
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64: v = o->via.f64; break;
      default: wrong_type(key, "a number", *o);
    }
    if (!std::isfinite(v)) fail(where_ + ": field '" + key + "' must be finite");
    if (v < lo || v > hi)
      fail(where_ + ": field '" + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]");
    return v;
  }

  std::optional<bool> opt_bool(const std::string& key) {
    const auto* o = find(key);
    if (!o) return std::nullopt;
    if (o->type != msgpack::type::BOOLEAN) wrong_type(key, "a boolean", *o);
    return o->via.boolean;
  }

  const msgpack::object_array* opt_array(const std::string& key, std::size_t max_len) {
    const auto* o = find(key);
    if (!o) return nullptr;
    if (o->type != msgpack::type::ARRAY) wrong_type(key, "an array", *o);
    if (o->via.array.size > max_len)
      fail(where_ + ": field '" + key + "' has more than " + std::to_string(max_len) + " entries");
    return &o->via.array;
  }

  // Unknown fields are errors so that a misspelt parameter is not silently ignored.
  void finish() {
    for (const auto& [key, _] : fields_)
      if (!used_.count(key)) fail(where_ + ": unknown field '" + key + "'");
  }

  [[noreturn]] void wrong_type(const std::string& key, std::string_view want, const msgpack::object& o) {
    fail(where_ + ": field '" + key + "' must be " + std::string(want) + ", got " + std::string(type_name(o)));
  }

 private:
  std::string where_;
  std::map<std::string, const msgpack::object*> fields_;
  std::set<std::string> used_;
};

std::string model_field(field_reader& r, const request_limits& lim) {
  auto m = r.opt_str("model", lim.max_name_len).value_or("");
  if (!m.empty() && !valid_model_name(m, lim.max_name_len)) fail("field 'model' is not a valid model name");
  return m;
}

std::string name_field(field_reader& r, const request_limits& lim) {
  auto n = r.str("name", lim.max_name_len);
  if (!valid_model_name(n, lim.max_name_len))
    fail("field 'name' must be 1-" + std::to_string(lim.max_name_len) + " characters of [A-Za-z0-9._:-]");
  return n;
}

std::string path_field(field_reader& r, const request_limits& lim) {
  auto p = r.str("path", lim.max_path_len);
  if (p.empty()) fail("field 'path' must not be empty");
  if (p.find('\0') != std::string::npos) fail("field 'path' contains a NUL byte");
  return p;
}

// The per-model options of load and swap. Device lists and ratios are checked for syntax by the
// daemon (their parser is the engine's); everything else here.
model_settings read_settings(field_reader& r) {
  model_settings m;
  auto member = [&r](const char* key, bool (*valid)(std::string_view), const char* expected) {
    auto v = r.opt_str(key, 64);
    if (v && !valid(*v)) fail("field '" + std::string(key) + "' = '" + *v + "' must be " + expected);
    return v;
  };
  m.gpus = r.opt_str("gpus", 1024);
  if (m.gpus && m.gpus->empty()) fail("field 'gpus' must not be empty");
  m.split = member("split", valid_split, "layer or tensor");
  m.ratios = r.opt_str("ratios", 1024);
  if (m.ratios && m.ratios->empty()) fail("field 'ratios' must not be empty");
  if (auto v = r.opt_uint("context", min_context, max_context)) m.context = static_cast<std::uint32_t>(*v);
  m.kv_type = member("kv_type", valid_kv_type, "f16, q8_0 or f32");
  m.keep_alive_s = r.opt_num("keep_alive", 0.0, max_keep_alive_s);
  if (auto v = r.opt_uint("parallel", 1, max_parallel)) m.parallel = static_cast<std::uint32_t>(*v);
  return m;
}

void read_sampling(field_reader& r, sampling_params& s) {
  if (auto v = r.opt_num("temperature", 0.0, 100.0)) s.temperature = static_cast<float>(*v);
  if (auto v = r.opt_uint("top_k", 0, 1u << 20)) s.top_k = static_cast<std::uint32_t>(*v);
  if (auto v = r.opt_num("top_p", 0.0, 1.0)) s.top_p = static_cast<float>(*v);
  if (auto v = r.opt_num("min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = r.opt_num("repeat_penalty", 0.01, 100.0)) s.repeat_penalty = static_cast<float>(*v);
  if (auto v = r.opt_uint("seed", 0, UINT64_MAX)) s.seed = *v;
}

generate_request read_generate(field_reader& r, const request_limits& lim) {
  generate_request g;
  g.model = model_field(r, lim);
  g.prompt = r.opt_str("prompt", UINT32_MAX);
  if (const auto* msgs = r.opt_array("messages", lim.max_messages)) {
    if (g.prompt) fail("give either 'prompt' or 'messages', not both");
    for (std::uint32_t i = 0; i < msgs->size; ++i) {
      field_reader m(msgs->ptr[i], "messages[" + std::to_string(i) + "]");
      chat_message cm;
      cm.role = m.str("role", lim.max_role_len);
      cm.content = m.str("content", UINT32_MAX);
      m.finish();
      g.messages.push_back(std::move(cm));
    }
    if (g.messages.empty()) fail("field 'messages' must not be empty");
  } else if (!g.prompt) {
    fail("generate needs 'prompt' or 'messages'");
  }
  read_sampling(r, g.sampling);
  if (auto v = r.opt_uint("max_tokens", 1, lim.max_tokens)) g.max_tokens = static_cast<std::uint32_t>(*v);
  if (const auto* stop = r.opt_array("stop", lim.max_stop)) {
    for (std::uint32_t i = 0; i < stop->size; ++i) {
      auto s = r.as_str(stop->ptr[i], "stop[" + std::to_string(i) + "]", lim.max_stop_len);
      if (s.empty()) fail("field 'stop' must not hold empty strings");
      g.stop.push_back(std::move(s));
    }
  }
  if (auto v = r.opt_bool("stream")) g.stream = *v;
  return g;
}

request_body read_body(const std::string& op, field_reader& r, const request_limits& lim) {
  if (op == "hello") return hello_request{r.opt_str("client", 256).value_or("")};
  if (op == "generate") return read_generate(r, lim);
  if (op == "cancel") return cancel_request{r.as_uint(r.need("target"), "target", 0, UINT64_MAX)};
  if (op == "tokenize") {
    tokenize_request t;
    t.model = model_field(r, lim);
    t.text = r.str("text", UINT32_MAX);
    if (auto v = r.opt_bool("add_special")) t.add_special = *v;
    return t;
  }
  if (op == "detokenize") {
    detokenize_request d;
    d.model = model_field(r, lim);
    const auto* toks = r.opt_array("tokens", UINT32_MAX);
    if (!toks) fail("detokenize needs field 'tokens'");
    d.tokens.reserve(toks->size);
    for (std::uint32_t i = 0; i < toks->size; ++i)
      d.tokens.push_back(static_cast<std::int32_t>(r.as_uint(toks->ptr[i], "tokens[" + std::to_string(i) + "]", 0, INT32_MAX)));
    return d;
  }
  if (op == "models") return models_request{};
  if (op == "load") {
    load_request l;
    l.name = name_field(r, lim);
    l.path = path_field(r, lim);
    l.settings = read_settings(r);
    return l;
  }
  if (op == "unload") return unload_request{name_field(r, lim)};
  if (op == "swap") {
    swap_request s;
    s.name = name_field(r, lim);
    s.path = path_field(r, lim);
    s.settings = read_settings(r);
    return s;
  }
  if (op == "status") return status_request{};
  if (op == "metrics") return metrics_request{};
  fail("unknown op '" + op + "'", error_code::unknown_op);
}

// Limits for msgpack-c: nothing in a body of n bytes can legitimately be bigger than n.
// Arrays and maps are further capped: each element costs a msgpack::object (24 bytes) up front.
msgpack::unpack_limit limits_for(std::size_t n, std::size_t depth) {
  const std::size_t max_array = std::min<std::size_t>(n, 1u << 20);
  const std::size_t max_map = std::min<std::size_t>(n / 2, 1024);
  return msgpack::unpack_limit(max_array, max_map, n, n, n, depth);
}

}  // namespace

decoded decode_request(std::string_view body, const request_limits& limits) {
  decoded out{std::nullopt, wire_error{error_code::internal, ""}};
  msgpack::object_handle handle;
  try {
    std::size_t off = 0;
    handle = msgpack::unpack(body.data(), body.size(), off, nullptr, nullptr,
                             limits_for(body.size(), limits.max_depth));
    if (off != body.size()) {
      out.value = wire_error{error_code::bad_frame, "frame holds trailing bytes after the msgpack map"};
      return out;
    }
  } catch (const msgpack::depth_size_overflow&) {
    out.value = wire_error{error_code::bad_frame, "msgpack nesting deeper than " + std::to_string(limits.max_depth)};
    return out;
  } catch (const std::exception& e) {
    out.value = wire_error{error_code::bad_frame, std::string("malformed msgpack: ") + e.what()};
    return out;
  }
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::MAP) {
    out.value = wire_error{error_code::bad_frame, "frame body must be a msgpack map, got " + std::string(type_name(root))};
    return out;
  }
  try {
    field_reader r(root, "request");
    // The id first, so that every later error can be answered with it.
    const auto* id = r.find("id");
    if (!id) fail("missing field 'id'");
    out.id = r.as_uint(*id, "id", 0, UINT64_MAX);
    const auto op = r.str("op", 32);
    request req{*out.id, read_body(op, r, limits)};
    r.finish();
    out.value = std::move(req);
  } catch (const field_error& e) {
    out.value = wire_error{e.code, e.message};
  } catch (const std::exception& e) {  // e.g. bad_alloc: still an answer, never a crash
    out.value = wire_error{error_code::internal, std::string("decoding failed: ") + e.what()};
  }
  return out;
}

std::string_view op_name(const request_body& body) {
  static constexpr std::string_view names[] = {"hello", "generate", "cancel", "tokenize", "detokenize",
                                                "models", "load", "unload", "swap", "status",
                                                "metrics"};
  static_assert(std::variant_size_v<request_body> == std::size(names));
  return names[body.index()];
}

bool valid_model_name(std::string_view name, std::size_t max_len) {
  if (name.empty() || name.size() > max_len) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace tandem::proto
