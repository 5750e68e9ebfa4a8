// Stopping goes through weak pointers: a connection told to stop may close and be destroyed,
// leaving the set, while the loop runs.
#include "connection_manager.h"

#include <vector>

#include "connection.h"

namespace tandem::http {

namespace {

std::vector<std::weak_ptr<connection>> snapshot(const std::unordered_set<connection*>& open) {
  std::vector<std::weak_ptr<connection>> all;
  for (connection* c : open) all.push_back(c->weak_from_this());
  return all;
}

}  // namespace

void connection_manager::stop_all() {
  for (auto& w : snapshot(open_))
    if (auto c = w.lock()) c->stop();
}

void connection_manager::abort_all() {
  for (auto& w : snapshot(open_))
    if (auto c = w.lock()) c->abort();
}

}  // namespace tandem::http
