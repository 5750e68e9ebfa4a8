// connection_manager: the set of live connections (I/O thread only).
#include "server/connection_manager.h"

#include "server/connection.h"

namespace tandem::daemon {

void connection_manager::start(std::shared_ptr<connection> c) {
  connections_.insert(c);
  c->start();
}

void connection_manager::stop(const std::shared_ptr<connection>& c) {
  if (connections_.erase(c)) c->stop();
}

void connection_manager::stop_all() {
  auto all = std::move(connections_);
  connections_.clear();
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

}  // namespace tandem::daemon
