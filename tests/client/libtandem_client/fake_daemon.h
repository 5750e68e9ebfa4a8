// A scripted stand-in for tandemd on a Unix socket in a temp dir: each request frame is handed to
// a script that answers with frames of its choosing (or garbage), and every request is recorded.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame.h"

namespace tandem::client::testing {

using json = nlohmann::json;

// The script's side of one connection.
class peer {
 public:
  explicit peer(int fd) : fd_(fd) {}
  void send(const json& reply) {
    std::string body;
    json::to_msgpack(reply, body);
    raw(proto::encode_frame(body));
  }
  void raw(const std::string& bytes) { [[maybe_unused]] auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  void close() { ::shutdown(fd_, SHUT_RDWR); }

 private:
  int fd_;
};

class fake_daemon {
 public:
  using script = std::function<void(const json& request, peer& p)>;

  explicit fake_daemon(script s) : script_(std::move(s)) {
    dir_ = std::filesystem::temp_directory_path() / ("tandem-client-test-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "d.sock").string();
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 8) != 0)
      throw std::runtime_error("fake_daemon: cannot listen on " + path_);
    accept_thread_ = std::thread([this] { serve(); });
  }

  ~fake_daemon() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    accept_thread_.join();
    for (auto& t : conn_threads_) t.join();
    std::filesystem::remove_all(dir_);
  }

  const std::string& path() const { return path_; }

  std::vector<json> requests(const std::string& op) {
    std::lock_guard lk(mu_);
    std::vector<json> out;
    for (const auto& r : requests_)
      if (r.value("op", "") == op) out.push_back(r);
    return out;
  }

 private:
  static std::atomic<int>& counter() {
    static std::atomic<int> n{0};
    return n;
  }

  void serve() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      conn_threads_.emplace_back([this, fd] { connection(fd); });
    }
  }

  void connection(int fd) {
    proto::frame_decoder dec;
    peer p(fd);
    char buf[65536];
    std::string body;
    for (;;) {
      while (dec.next(body) == proto::frame_decoder::state::frame) {
        json req = json::from_msgpack(body);
        {
          std::lock_guard lk(mu_);
          requests_.push_back(req);
        }
        script_(req, p);
      }
      const auto n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      dec.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    ::close(fd);
  }

  script script_;
  std::filesystem::path dir_;
  std::string path_;
  int listen_fd_ = -1;
  std::thread accept_thread_;
  std::vector<std::thread> conn_threads_;  // touched by the accept thread only, until it is joined
  std::mutex mu_;
  std::vector<json> requests_;
};

// {model, finish_reason, token counts, timings} as the daemon sends them.
inline json stats(const std::string& finish = "length") {
  return {{"model", "default"},      {"finish_reason", finish}, {"prompt_tokens", 3},
          {"reused_tokens", 1},       {"generated_tokens", 2},   {"first_token_seconds", 0.05},
          {"prefill_seconds", 0.1},   {"decode_seconds", 0.2},   {"prefill_tok_s", 30.0},
          {"decode_tok_s", 5.0}};
}

}  // namespace tandem::client::testing
