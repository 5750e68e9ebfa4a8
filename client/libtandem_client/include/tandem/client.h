// libtandem-client: a blocking C++ client of tandemd speaking tandem-protocol(7) over its Unix
// socket, with typed requests and replies. Only the standard library is needed to use this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#if defined(__GNUC__)
#define TANDEM_CLIENT_API __attribute__((visibility("default")))
#else
#define TANDEM_CLIENT_API
#endif

namespace tandem::client {

// The protocol version this library speaks (hello's `protocol`).
inline constexpr int protocol_version = 1;

enum class error_kind {
  connect,      // the socket could not be reached: missing, refused, permission denied
  usage,        // refused before anything was sent (a socket path too long, a bad argument)
  io,           // the connection broke: the daemon closed it, a read or write failed
  protocol,     // a reply could not be understood (bad frame, wrong field types)
  daemon,       // the daemon answered {error: {code, message}}: `code` and `message` are its words
  timeout,      // no final reply before the connection's timeout (set_timeout)
  interrupted,  // cancel() was asked for and the daemon did not end the generation in time
};

struct error {
  error_kind kind = error_kind::protocol;
  std::string code;     // error_kind::daemon: the daemon's code ("not_found", "busy", ...); else empty
  std::string message;  // for people; for daemon errors the daemon's message alone
  int sys_errno = 0;    // connect and io: the errno behind it, else 0
};

// "CODE: message" for daemon errors, the message otherwise.
TANDEM_CLIENT_API std::string to_string(const error& e);

// A value or an error; test ok() before using the value.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

// ---- requests: unset optionals are not sent, so the daemon's defaults apply ----

struct chat_message {
  std::string role;  // system, user, assistant
  std::string content;
};

struct generate_request {
  std::string model;                   // alias; empty: the daemon's default
  std::optional<std::string> prompt;   // sent as is; when unset, `messages` are sent instead
  std::vector<chat_message> messages;  // rendered with the model's chat template
  std::optional<std::uint32_t> max_tokens;
  std::optional<double> temperature;  // 0 = greedy
  std::optional<std::uint32_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repeat_penalty;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;  // at most 16 non-empty strings
};

struct tokenize_request {
  std::string model;
  std::string text;
  bool add_special = true;  // BOS when the model wants it
};

struct detokenize_request {
  std::string model;
  std::vector<std::int32_t> tokens;
};

// A model's own settings for load and swap; each one left unset comes from the daemon's
// [model.NAME] table for the alias, then from its global keys (tandemd.conf(5)).
struct model_settings {
  std::optional<std::uint32_t> context;  // KV cache tokens per sequence, 16 to 16777216
  std::optional<std::string> kv_type;    // f16, q8_0 or f32
  std::optional<std::string> gpus;       // CUDA devices to split over: "0,1", "0=16GiB,1=32GiB"
  std::optional<std::string> split;      // with gpus: layer or tensor
  std::optional<std::string> ratios;     // with gpus: shares per device, "1,1.75"
  std::optional<std::uint32_t> parallel; // sequences decoded together, 1 to 256
  std::optional<double> keep_alive_s;    // idle seconds before unload; 0: never
};

struct load_request {
  std::string name;  // 1-64 of [A-Za-z0-9._:-]
  std::string path;  // resolved by the daemon, in its own working directory
  model_settings settings;
};

struct swap_request {
  std::string name;
  std::string path;
  model_settings settings;  // the new model's, as for load (not carried over from the old one)
};

// ---- replies: each keeps the whole result map as JSON text, for fields not typed here ----

struct hello_reply {
  std::string server;
  std::string version;
  int protocol = 0;
  std::uint64_t max_frame = 0;
  std::string result_json;
};

struct generate_result {
  std::uint64_t id = 0;  // the request's id on this connection
  std::string text;      // every streamed piece, in order
  std::string model;
  std::string finish_reason;  // length, stop, context_limit, cancelled
  std::uint64_t prompt_tokens = 0;
  std::optional<std::uint64_t> reused_tokens;  // prompt tokens a cached prefix held (newer daemons)
  std::uint64_t generated_tokens = 0;
  double first_token_seconds = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
  bool cancel_sent = false;  // cancel() reached this generation (it may still have ended otherwise)
  std::string result_json;
};

struct cancel_reply {
  bool cancelled = false;
  std::string result_json;
};

struct tokenize_reply {
  std::vector<std::int32_t> tokens;
  std::uint64_t count = 0;
  std::string result_json;
};

struct detokenize_reply {
  std::string text;
  std::string result_json;
};

struct sequence_counts {
  std::uint64_t running = 0;  // in a slot, prefilling or decoding
  std::uint64_t waiting = 0;  // taken by the engine, not yet in a slot
};

// How a model's load went (newer daemons): the weight bytes the engine placed and the seconds
// its open of the file took.
struct load_figures {
  std::uint64_t bytes = 0;
  double seconds = 0;
  double bytes_per_second = 0;
};

// One alias of `models` / `status`. The optionals are present while the model is resident.
struct model_info {
  std::string name;
  std::string path;
  std::string state;  // loading, resident, unloaded, swapping
  bool is_default = false;
  std::uint64_t queued = 0;
  bool running = false;
  std::optional<double> keep_alive_s;
  std::uint64_t swaps = 0;
  std::optional<std::string> arch, backend, device, kv_type;
  std::optional<std::uint64_t> n_vocab, n_ctx, file_bytes, cache_bytes, state_bytes, bytes;
  std::optional<double> idle_seconds;
  std::optional<std::uint64_t> completed, parallel;
  std::optional<sequence_counts> sequences;
  std::optional<std::uint64_t> prefix_hits, reused_tokens;
  std::optional<load_figures> load;  // how its load went (newer daemons)
};

struct models_reply {
  std::vector<model_info> models;
  std::string result_json;
};

struct memory_info {
  std::uint64_t rss_bytes = 0;
  std::uint64_t model_bytes = 0;
  std::uint64_t budget_bytes = 0;  // 0: unlimited
  std::uint64_t budget_used_bytes = 0;
};

struct device_info {
  std::string device;  // cpu, cuda:N, cuda:A+B
  std::vector<std::string> models;
  std::uint64_t model_bytes = 0;
  std::optional<std::uint64_t> total_bytes, available_bytes;  // absent when the device did not answer
};

// A load, reload or swap of status's `loads` (newer daemons): an open of a model file that runs now.
struct load_in_progress {
  std::string name;  // the alias
  std::string op;    // load, reload (a request for an unloaded alias; a failed drain-first swap's old file), swap
  std::string path;  // the file being opened
  std::uint64_t done_bytes = 0;   // weight bytes placed so far
  std::uint64_t total_bytes = 0;  // weight bytes it places; 0 until the engine knows
  double seconds = 0;             // since the open began
  double bytes_per_second = 0;
};

struct status_reply {
  std::string version;
  int protocol = 0;
  std::int64_t pid = 0;
  double uptime_seconds = 0;
  bool draining = false;
  std::uint64_t connections = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t queued = 0;
  memory_info memory;
  std::vector<device_info> devices;
  std::vector<model_info> models;
  std::vector<load_in_progress> loads;
  std::string result_json;
};

// load and swap.
struct loaded_reply {
  std::string name;
  std::string path;
  std::string arch;
  std::string backend;
  std::optional<std::string> device, kv_type;  // newer daemons
  std::optional<std::uint64_t> parallel;
  std::uint64_t n_vocab = 0;
  std::uint64_t n_ctx = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t cache_bytes = 0;
  std::optional<load_figures> load;  // newer daemons
  std::string result_json;
};

struct unload_reply {
  std::string name;
  std::string result_json;
};

// What generate() calls while the request runs, all on the calling thread.
struct stream_handlers {
  std::function<void(std::uint64_t id)> on_start;  // the request was sent under this id
  std::function<void(std::string_view text)> on_text;  // each streamed piece (whole UTF-8 characters)
  // Every reply of the request (chunks, the final result or error) as compact JSON text.
  std::function<void(std::string_view reply_json)> on_reply;
  std::function<void()> on_cancel_sent;  // cancel() was acted upon: a cancel request went out
  // After a cancel, how long the daemon may take to end the generation before generate() gives
  // up with error_kind::interrupted (closing the connection then cancels it on its side).
  std::chrono::milliseconds cancel_wait{3000};
};

// One connection to tandemd. Calls block until their final reply. One thread uses a connection at
// a time; cancel() is the exception: any thread, or a signal handler, may call it.
class TANDEM_CLIENT_API connection {
 public:
  // Connects to the Unix socket at `socket_path`. Failures say why in words a user can act on
  // (error_kind::connect; error_kind::usage for an empty or too long path).
  static result<connection> connect(const std::string& socket_path);

  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  // The longest any call waits for its final reply; zero (the default) waits as long as it takes.
  // A timed-out call leaves its request running, so the connection is then unusable.
  void set_timeout(std::chrono::milliseconds timeout);

  // False once the connection broke, timed out or saw a reply it could not parse: calls then fail
  // with error_kind::io at once. A daemon error reply leaves it usable.
  bool usable() const;

  result<hello_reply> hello(const std::string& client_name = "libtandem-client");

  // Streams one generation (the protocol's stream=true). A daemon error reply is an error even
  // after some text was streamed; that text went to on_text.
  result<generate_result> generate(const generate_request& request, const stream_handlers& handlers = {});

  // Asks the generate() running on this connection to stop: it sends the protocol's `cancel`
  // and keeps reading until the generation ends (finish_reason cancelled). A second cancel while
  // waiting gives up at once (error_kind::interrupted). Thread-safe and async-signal-safe (it only
  // write()s to a pipe); a cancel while no generate() runs is dropped when the next one starts.
  void cancel() noexcept;
  // The same, for the running request with this id (see stream_handlers::on_start); other ids are
  // ignored, as nothing else can be in flight on a blocking connection.
  void cancel(std::uint64_t request_id) noexcept;

  result<tokenize_reply> tokenize(const tokenize_request& request);
  result<detokenize_reply> detokenize(const detokenize_request& request);
  result<models_reply> models();
  result<status_reply> status();
  result<loaded_reply> load(const load_request& request);
  result<loaded_reply> swap(const swap_request& request);
  result<unload_reply> unload(const std::string& name);

 private:
  struct impl;
  explicit connection(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem::client
