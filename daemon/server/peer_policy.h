// peer_policy: which local users may talk to tandemd, decided from SO_PEERCRED (uid, gid) and
// SO_PEERGROUPS (supplementary groups) before a single byte of the peer is parsed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/result.h"

namespace tandem::daemon {

class peer_policy {
 public:
  // Root and the daemon's own uid are always allowed.
  peer_policy(std::vector<uid_t> uids, std::vector<gid_t> gids);

  // Resolves names or numbers ("alice", "1000"); unknown names are errors.
  static result<peer_policy> from_names(const std::vector<std::string>& users,
                                        const std::vector<std::string>& groups, gid_t socket_gid);

  // Looks at the peer of a connected AF_UNIX socket. On refusal `why` says who was refused.
  bool allows(int fd, std::string& who) const;

 private:
  std::vector<uid_t> uids_;
  std::vector<gid_t> gids_;
};

result<uid_t> resolve_user(const std::string& name);
result<gid_t> resolve_group(const std::string& name);

}  // namespace tandem::daemon
