// connection_manager: the set of live connections and the client limits (I/O thread only).
#include "server/connection_manager.h"

#include <vector>

#include "log.h"
#include "server/connection.h"

namespace tandem::daemon {

std::optional<std::string> connection_manager::refusal(uid_t uid) const {
  if (connections_.size() >= limits_.max_connections)
    return "too many connections (max-connections " + std::to_string(limits_.max_connections) + ")";
  const auto it = per_user_.find(uid);
  if (it != per_user_.end() && it->second >= limits_.max_per_user)
    return "too many connections of uid " + std::to_string(uid) + " (max-connections-per-user " +
           std::to_string(limits_.max_per_user) + ")";
  return std::nullopt;
}

void connection_manager::start(std::shared_ptr<connection> c) {
  ++per_user_[c->uid()];
  connections_.insert(c);
  c->start();
}

void connection_manager::stop(const std::shared_ptr<connection>& c) {
  if (!connections_.erase(c)) return;
  if (auto it = per_user_.find(c->uid()); it != per_user_.end() && --it->second == 0) per_user_.erase(it);
  c->stop();  // gives back its buffered bytes
}

void connection_manager::stop_all() {
  auto all = std::move(connections_);
  connections_.clear();
  per_user_.clear();
  for (const auto& c : all) c->stop();
}

void connection_manager::cancel_all() {
  for (const auto& c : connections_) c->cancel_all();
}

std::size_t connection_manager::in_flight() const {
  std::size_t n = 0;
  for (const auto& c : connections_) n += c->in_flight();
  return n;
}

bool connection_manager::charge_buffered(std::size_t before, std::size_t after) {
  buffered_ = buffered_ - std::min<std::uint64_t>(before, buffered_) + after;
  return after <= before || buffered_ <= limits_.max_buffered;
}

void connection_manager::sweep(clock::time_point now) {
  std::vector<std::shared_ptr<connection>> expired;
  for (const auto& c : connections_) {
    if (const char* why = c->expired(now, limits_.frame_timeout, limits_.idle_timeout)) {
      log(log_level::info, "closing a connection: ", why);
      expired.push_back(c);
    }
  }
  for (const auto& c : expired) c->expire();
}

}  // namespace tandem::daemon
