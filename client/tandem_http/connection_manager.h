// connection_manager: the open HTTP connections, counted against --max-connections and told to
// finish when the server stops (as in Asio's HTTP server example).
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_set>

namespace tandem::http {

class connection;

class connection_manager {
 public:
  // A connection registers itself when it starts and leaves in its destructor.
  void add(connection* c) { open_.insert(c); }
  void remove(connection* c) { open_.erase(c); }
  std::size_t size() const { return open_.size(); }

  // Asks every connection to close: idle ones at once, busy ones after their reply.
  void stop_all();

  // Closes every connection at once (at exit, after the grace time).
  void abort_all();

 private:
  std::unordered_set<connection*> open_;
};

}  // namespace tandem::http
