// peer_policy: SO_PEERCRED / SO_PEERGROUPS checks.
#include "server/peer_policy.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace tandem::daemon {
namespace {
template <class T>
bool parse_number(const std::string& s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}
}  // namespace

result<uid_t> resolve_user(const std::string& name) {
  uid_t u = 0;
  if (parse_number(name, u)) return u;
  passwd pw{}, *res = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || !res)
    return make_error("unknown user '", name, "'");
  return res->pw_uid;
}

result<gid_t> resolve_group(const std::string& name) {
  gid_t g = 0;
  if (parse_number(name, g)) return g;
  group gr{}, *res = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &res) != 0 || !res)
    return make_error("unknown group '", name, "'");
  return res->gr_gid;
}

peer_policy::peer_policy(std::vector<uid_t> uids, std::vector<gid_t> gids)
    : uids_(std::move(uids)), gids_(std::move(gids)) {
  uids_.push_back(0);
  uids_.push_back(geteuid());
}

result<peer_policy> peer_policy::from_names(const std::vector<std::string>& users,
                                            const std::vector<std::string>& groups, gid_t socket_gid) {
  std::vector<uid_t> uids;
  std::vector<gid_t> gids{socket_gid};
  for (const auto& u : users) {
    auto r = resolve_user(u);
    if (!r) return r.err();
    uids.push_back(*r);
  }
  for (const auto& g : groups) {
    auto r = resolve_group(g);
    if (!r) return r.err();
    gids.push_back(*r);
  }
  return peer_policy(std::move(uids), std::move(gids));
}

bool peer_policy::allows(int fd, std::string& who) const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    who = "a peer whose credentials could not be read";
    return false;
  }
  who = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid) + " gid " + std::to_string(cred.gid);
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (has(uids_, cred.uid) || has(gids_, cred.gid)) return true;
  // Supplementary groups (Linux 4.13+): membership in the socket group need not be primary.
  std::vector<gid_t> groups(64);
  len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(len / sizeof(gid_t) + 1);
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  }
  if (rc != 0) return false;
  groups.resize(len / sizeof(gid_t));
  for (gid_t g : groups)
    if (has(gids_, g)) return true;
  return false;
}

}  // namespace tandem::daemon
