// Reply parsing: msgpack-c checks size and depth limits first (nlohmann's parser recurses, so a
// hostile nesting must not reach it), then nlohmann builds the value the typed decoders read.
#include "reply_decoder.h"

#include <msgpack.hpp>

#include <algorithm>
#include <limits>

namespace tandem::client::wire {
namespace {

using json = nlohmann::json;

error protocol_error(std::string message) { return error{error_kind::protocol, "", std::move(message), 0}; }

// Reads typed fields of one map; the first field of a wrong type is remembered as the error.
// Absent (or nil) fields read as their defaults.
class fields {
 public:
  fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) fail("", "is not a map");
  }

  const std::optional<error>& err() const { return err_; }

  std::optional<std::string> opt_str(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) {
      fail(key, "is not a string");
      return std::nullopt;
    }
    return v->get<std::string>();
  }
  std::string str(const char* key) { return opt_str(key).value_or(""); }

  std::optional<std::uint64_t> opt_u64(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) return v->get<std::uint64_t>();
    if (v->is_number_integer() && v->get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v->get<std::int64_t>());
    fail(key, "is not an unsigned integer");
    return std::nullopt;
  }
  std::uint64_t u64(const char* key) { return opt_u64(key).value_or(0); }

  std::int64_t i64(const char* key) {
    const json* v = find(key);
    if (!v) return 0;
    if (v->is_number_integer() && !v->is_number_unsigned()) return v->get<std::int64_t>();
    if (v->is_number_unsigned() && v->get<std::uint64_t>() <= std::numeric_limits<std::int64_t>::max())
      return static_cast<std::int64_t>(v->get<std::uint64_t>());
    fail(key, "is not an integer");
    return 0;
  }

  std::optional<double> opt_f64(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) {
      fail(key, "is not a number");
      return std::nullopt;
    }
    return v->get<double>();
  }
  double f64(const char* key) { return opt_f64(key).value_or(0.0); }

  bool boolean(const char* key) {
    const json* v = find(key);
    if (!v) return false;
    if (!v->is_boolean()) {
      fail(key, "is not a boolean");
      return false;
    }
    return v->get<bool>();
  }

  // An array field (empty when absent); nullptr after a type error.
  const json* array(const char* key) {
    static const json empty = json::array();
    const json* v = find(key);
    if (!v) return &empty;
    if (!v->is_array()) {
      fail(key, "is not an array");
      return nullptr;
    }
    return v;
  }

  // A map field; nullptr when absent or after a type error.
  const json* map(const char* key) {
    const json* v = find(key);
    if (v && !v->is_object()) {
      fail(key, "is not a map");
      return nullptr;
    }
    return v;
  }

  // Adopts a nested reader's error (the first one wins).
  void take(const std::optional<error>& e) {
    if (e && !err_) err_ = e;
  }

  void fail(const char* key, const char* why) {
    if (err_) return;
    err_ = protocol_error(what_ + (*key ? std::string(": '") + key + "' " : std::string(" ")) + why);
  }

 private:
  const json* find(const char* key) const {
    if (!j_.is_object()) return nullptr;
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  const json& j_;
  std::string what_;
  std::optional<error> err_;
};

template <class T>
result<T> finish(const fields& f, T value, const json& j) {
  if (f.err()) return *f.err();
  value.result_json = json_text(j);
  return value;
}

// A {bytes, seconds, bytes_per_second} map (a model's `load`); absent: nullopt.
std::optional<load_figures> read_load_figures(fields& parent, const char* key, const std::string& what) {
  const json* l = parent.map(key);
  if (!l) return std::nullopt;
  fields f(*l, what + ": '" + key + "'");
  load_figures r{f.u64("bytes"), f.f64("seconds"), f.f64("bytes_per_second")};
  parent.take(f.err());
  return r;
}

load_in_progress read_load(const json& l, fields& parent) {
  fields f(l, "status: load entry");
  load_in_progress r;
  r.name = f.str("name");
  r.op = f.str("op");
  r.path = f.str("path");
  r.done_bytes = f.u64("done_bytes");
  r.total_bytes = f.u64("total_bytes");
  r.seconds = f.f64("seconds");
  r.bytes_per_second = f.f64("bytes_per_second");
  parent.take(f.err());
  return r;
}

model_info read_model(const json& m, fields& parent) {
  fields f(m, "model entry");
  model_info i;
  i.name = f.str("name");
  i.path = f.str("path");
  i.state = f.str("state");
  i.is_default = f.boolean("default");
  i.queued = f.u64("queued");
  i.running = f.boolean("running");
  i.keep_alive_s = f.opt_f64("keep_alive");
  i.swaps = f.u64("swaps");
  i.arch = f.opt_str("arch");
  i.backend = f.opt_str("backend");
  i.device = f.opt_str("device");
  i.kv_type = f.opt_str("kv_type");
  i.n_vocab = f.opt_u64("n_vocab");
  i.n_ctx = f.opt_u64("n_ctx");
  i.file_bytes = f.opt_u64("file_bytes");
  i.cache_bytes = f.opt_u64("cache_bytes");
  i.state_bytes = f.opt_u64("state_bytes");
  i.bytes = f.opt_u64("bytes");
  i.idle_seconds = f.opt_f64("idle_seconds");
  i.completed = f.opt_u64("completed");
  i.parallel = f.opt_u64("parallel");
  if (const json* s = f.map("sequences")) {
    fields sf(*s, "model entry: 'sequences'");
    i.sequences = sequence_counts{sf.u64("running"), sf.u64("waiting")};
    f.take(sf.err());
  }
  i.prefix_hits = f.opt_u64("prefix_hits");
  i.reused_tokens = f.opt_u64("reused_tokens");
  i.load = read_load_figures(f, "load", "model entry");
  parent.take(f.err());
  return i;
}

std::vector<model_info> read_models(fields& f) {
  std::vector<model_info> out;
  if (const json* list = f.array("models"))
    for (const auto& m : *list) out.push_back(read_model(m, f));
  return out;
}

device_info read_device(const json& d, fields& parent) {
  fields f(d, "status: device entry");
  device_info i;
  i.device = f.str("device");
  if (const json* names = f.array("models"))
    for (const auto& n : *names) {
      if (!n.is_string()) {
        f.fail("models", "holds a name that is not a string");
        break;
      }
      i.models.push_back(n.get<std::string>());
    }
  i.model_bytes = f.u64("model_bytes");
  i.total_bytes = f.opt_u64("total_bytes");
  i.available_bytes = f.opt_u64("available_bytes");
  parent.take(f.err());
  return i;
}

}  // namespace

result<reply> parse_reply(std::string_view body) {
  // Limits from the body size, as the daemon sets its own (tandem-protocol(7)): nothing can
  // claim more elements than there are bytes.
  const std::size_t n = body.size();
  const msgpack::unpack_limit limits(std::min<std::size_t>(n, 1u << 24), std::min<std::size_t>(n / 2, 1u << 20), n,
                                     n, n, max_reply_depth);
  try {
    std::size_t off = 0;
    msgpack::object_handle handle = msgpack::unpack(body.data(), n, off, nullptr, nullptr, limits);
    if (off != n) return protocol_error("tandemd sent a reply with bytes after its msgpack map");
  } catch (const msgpack::depth_size_overflow&) {
    return protocol_error("tandemd sent a reply nested deeper than " + std::to_string(max_reply_depth) + " levels");
  } catch (const std::exception& e) {
    return protocol_error(std::string("tandemd sent a reply that is not msgpack: ") + e.what());
  }
  reply r;
  r.map = json::from_msgpack(body, true, false);
  if (r.map.is_discarded() || !r.map.is_object() || !r.map.contains("id"))
    return protocol_error("tandemd sent a reply that is not a map with an id");
  const json& id = r.map["id"];
  if (id.is_number_unsigned()) r.id = id.get<std::uint64_t>();
  else if (!id.is_null()) return protocol_error("tandemd sent a reply whose id is not an unsigned integer");
  return r;
}

error daemon_error(const json& reply_map) {
  const json* e = reply_map.contains("error") ? &reply_map["error"] : nullptr;
  auto text = [e](const char* key) -> std::optional<std::string> {
    if (!e || !e->is_object() || !e->contains(key) || !(*e)[key].is_string()) return std::nullopt;
    return (*e)[key].get<std::string>();
  };
  return error{error_kind::daemon, text("code").value_or("internal"), text("message").value_or(""), 0};
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

result<hello_reply> decode_hello(const json& j) {
  fields f(j, "hello result");
  hello_reply r;
  r.server = f.str("server");
  r.version = f.str("version");
  r.protocol = static_cast<int>(f.i64("protocol"));
  r.max_frame = f.u64("max_frame");
  return finish(f, std::move(r), j);
}

result<generate_result> decode_generate(const json& j) {
  fields f(j, "generate result");
  generate_result r;
  r.model = f.str("model");
  r.finish_reason = f.str("finish_reason");
  r.prompt_tokens = f.u64("prompt_tokens");
  r.reused_tokens = f.opt_u64("reused_tokens");
  r.generated_tokens = f.u64("generated_tokens");
  r.first_token_seconds = f.f64("first_token_seconds");
  r.prefill_seconds = f.f64("prefill_seconds");
  r.decode_seconds = f.f64("decode_seconds");
  r.prefill_tok_s = f.f64("prefill_tok_s");
  r.decode_tok_s = f.f64("decode_tok_s");
  return finish(f, std::move(r), j);
}

result<cancel_reply> decode_cancel(const json& j) {
  fields f(j, "cancel result");
  cancel_reply r;
  r.cancelled = f.boolean("cancelled");
  return finish(f, std::move(r), j);
}

result<tokenize_reply> decode_tokenize(const json& j) {
  fields f(j, "tokenize result");
  tokenize_reply r;
  if (const json* toks = f.array("tokens"))
    for (const auto& t : *toks) {
      if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() > 0x7fffffff) {
        f.fail("tokens", "holds something that is not a token id");
        break;
      }
      r.tokens.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
    }
  r.count = f.opt_u64("count").value_or(r.tokens.size());
  return finish(f, std::move(r), j);
}

result<detokenize_reply> decode_detokenize(const json& j) {
  fields f(j, "detokenize result");
  detokenize_reply r;
  r.text = f.str("text");
  return finish(f, std::move(r), j);
}

result<models_reply> decode_models(const json& j) {
  fields f(j, "models result");
  models_reply r;
  r.models = read_models(f);
  return finish(f, std::move(r), j);
}

result<status_reply> decode_status(const json& j) {
  fields f(j, "status result");
  status_reply r;
  r.version = f.str("version");
  r.protocol = static_cast<int>(f.i64("protocol"));
  r.pid = f.i64("pid");
  r.uptime_seconds = f.f64("uptime_seconds");
  r.draining = f.boolean("draining");
  r.connections = f.u64("connections");
  r.in_flight = f.u64("in_flight");
  r.queued = f.u64("queued");
  if (const json* m = f.map("memory")) {
    fields mf(*m, "status: 'memory'");
    r.memory = memory_info{mf.u64("rss_bytes"), mf.u64("model_bytes"), mf.u64("budget_bytes"),
                           mf.u64("budget_used_bytes")};
    f.take(mf.err());
  }
  if (const json* devices = f.array("devices"))
    for (const auto& d : *devices) r.devices.push_back(read_device(d, f));
  r.models = read_models(f);
  if (const json* loads = f.array("loads"))
    for (const auto& l : *loads) r.loads.push_back(read_load(l, f));
  return finish(f, std::move(r), j);
}

result<loaded_reply> decode_loaded(const json& j) {
  fields f(j, "load result");
  loaded_reply r;
  r.name = f.str("name");
  if (const json* m = f.map("model")) {
    fields mf(*m, "load result: 'model'");
    r.path = mf.str("path");
    r.arch = mf.str("arch");
    r.backend = mf.str("backend");
    r.device = mf.opt_str("device");
    r.kv_type = mf.opt_str("kv_type");
    r.parallel = mf.opt_u64("parallel");
    r.n_vocab = mf.u64("n_vocab");
    r.n_ctx = mf.u64("n_ctx");
    r.file_bytes = mf.u64("file_bytes");
    r.cache_bytes = mf.u64("cache_bytes");
    r.load = read_load_figures(mf, "load", "load result: 'model'");
    f.take(mf.err());
  }
  return finish(f, std::move(r), j);
}

result<unload_reply> decode_unload(const json& j) {
  fields f(j, "unload result");
  unload_reply r;
  r.name = f.str("name");
  return finish(f, std::move(r), j);
}

}  // namespace tandem::client::wire
