// connection_manager: owns the open connections so that shutdown can cancel and close them all.
#pragma once

#include <memory>
#include <set>

namespace tandem::daemon {

class connection;

class connection_manager {
 public:
  void start(std::shared_ptr<connection> c);
  void stop(const std::shared_ptr<connection>& c);
  void stop_all();
  void cancel_all();  // cancels every in-flight request, keeps the sockets open
  std::size_t size() const { return connections_.size(); }
  std::size_t in_flight() const;

 private:
  std::set<std::shared_ptr<connection>> connections_;
};

}  // namespace tandem::daemon
