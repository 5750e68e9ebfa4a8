// tandem-http's socket activation: LISTEN_PID/LISTEN_FDS parsing as sd_listen_fds(3) reads them,
// the check of each passed fd, and the whole take (in a forked child, which owns fd 3 and its
// environment without disturbing the test process).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "socket_activation.h"

namespace tandem::http {
namespace {

TEST(HttpSocketActivation, EnvWithoutListenPidIsNoActivation) {
  auto e = parse_activation_env(nullptr, "2", 100);
  EXPECT_EQ(e.count, 0);
  EXPECT_EQ(e.error, "");
  e = parse_activation_env(nullptr, nullptr, 100);
  EXPECT_EQ(e.count, 0);
  EXPECT_EQ(e.error, "");
}

TEST(HttpSocketActivation, EnvForAnotherProcessIsIgnored) {
  // Inherited from an activated parent: not ours, whatever LISTEN_FDS says.
  for (const char* fds : {"1", "0", "junk"}) {
    auto e = parse_activation_env("4242", fds, 100);
    EXPECT_EQ(e.count, 0) << fds;
    EXPECT_EQ(e.error, "") << fds;
  }
}

TEST(HttpSocketActivation, EnvCountsSocketsForUs) {
  EXPECT_EQ(parse_activation_env("100", "1", 100).count, 1);
  EXPECT_EQ(parse_activation_env("100", "3", 100).count, 3);
  auto e = parse_activation_env("100", std::to_string(activation_max_sockets).c_str(), 100);
  EXPECT_EQ(e.count, activation_max_sockets);
  EXPECT_EQ(e.error, "");
  // LISTEN_PID without LISTEN_FDS passes nothing.
  e = parse_activation_env("100", nullptr, 100);
  EXPECT_EQ(e.count, 0);
  EXPECT_EQ(e.error, "");
}

TEST(HttpSocketActivation, EnvThatDoesNotParseIsAnError) {
  for (const char* pid : {"", "abc", "12x", "-5", "0", " 100", "99999999999999999999999"}) {
    auto e = parse_activation_env(pid, "1", 100);
    EXPECT_EQ(e.count, 0) << pid;
    EXPECT_NE(e.error.find("LISTEN_PID"), std::string::npos) << "'" << pid << "': " << e.error;
  }
  for (const char* fds : {"0", "-1", "", "two", "1 ", "+1", "4294967297"}) {
    auto e = parse_activation_env("100", fds, 100);
    EXPECT_EQ(e.count, 0) << fds;
    EXPECT_NE(e.error.find("LISTEN_FDS"), std::string::npos) << "'" << fds << "': " << e.error;
  }
  auto e = parse_activation_env("100", std::to_string(activation_max_sockets + 1).c_str(), 100);
  EXPECT_EQ(e.count, 0);
  EXPECT_NE(e.error.find("more than"), std::string::npos) << e.error;
}

// A TCP socket on 127.0.0.1 with an ephemeral port; listening or not.
int tcp_socket(bool listening, std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (listening) {
    EXPECT_EQ(::listen(fd, 4), 0);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

TEST(HttpSocketActivation, InspectsTcpListeners) {
  std::uint16_t port = 0;
  const int fd = tcp_socket(true, port);
  std::string why;
  int family = 0;
  auto a = inspect_listening_socket(fd, family, why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(family, AF_INET);
  EXPECT_EQ(a->type, listen_address::kind::tcp);
  EXPECT_EQ(a->describe(), "127.0.0.1:" + std::to_string(port));
  ::close(fd);

  const int fd6 = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  if (fd6 < 0 || ::bind(fd6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) != 0) {
    if (fd6 >= 0) ::close(fd6);
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  ASSERT_EQ(::listen(fd6, 4), 0);
  a = inspect_listening_socket(fd6, family, why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(family, AF_INET6);
  EXPECT_EQ(a->describe().substr(0, 6), "[::1]:");
  ::close(fd6);
}

TEST(HttpSocketActivation, InspectsUnixListeners) {
  const std::string path = ::testing::TempDir() + "act-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  std::string why;
  int family = 0;
  auto got = inspect_listening_socket(fd, family, why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(family, AF_UNIX);
  EXPECT_EQ(got->describe(), "unix:" + path);
  ::close(fd);
  ::unlink(path.c_str());

  // The abstract namespace, shown with an @.
  const int afd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un ab{};
  ab.sun_family = AF_UNIX;
  const std::string name = "tandem-act-test-" + std::to_string(::getpid());
  std::memcpy(ab.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(::bind(afd, reinterpret_cast<sockaddr*>(&ab), offsetof(sockaddr_un, sun_path) + 1 + name.size()), 0);
  ASSERT_EQ(::listen(afd, 4), 0);
  got = inspect_listening_socket(afd, family, why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(got->describe(), "unix:@" + name);
  ::close(afd);
}

TEST(HttpSocketActivation, RefusesWhatIsNotAListeningStreamSocket) {
  std::string why;
  int family = 0;
  std::uint16_t port = 0;
  const int bound = tcp_socket(false, port);  // Accept=yes would pass a connection, not a listener
  EXPECT_FALSE(inspect_listening_socket(bound, family, why));
  EXPECT_NE(why.find("not a listening stream socket"), std::string::npos) << why;
  ::close(bound);
  const int dgram = ::socket(AF_INET, SOCK_DGRAM, 0);
  EXPECT_FALSE(inspect_listening_socket(dgram, family, why));
  EXPECT_NE(why.find("not a listening stream socket"), std::string::npos) << why;
  ::close(dgram);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_FALSE(inspect_listening_socket(p[0], family, why));
  EXPECT_NE(why.find("is not a socket"), std::string::npos) << why;
  ::close(p[0]);
  ::close(p[1]);
}

// Runs `body` in a child whose fd 3 is `fd3` (or closed for -1) with the given environment, and
// returns its exit status: 0 when every check in it held, else the number of the failed check.
template <typename Body>
int in_child(int fd3, const char* listen_pid, const char* listen_fds, Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (fd3 >= 0) {
      if (fd3 != 3 && ::dup2(fd3, 3) != 3) ::_exit(100);
    } else {
      ::close(3);
    }
    const std::string self = std::to_string(::getpid());
    ::setenv("LISTEN_PID", listen_pid ? listen_pid : self.c_str(), 1);
    ::setenv("LISTEN_FDS", listen_fds, 1);
    ::setenv("LISTEN_FDNAMES", "http", 1);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

bool env_cleared() {
  return !std::getenv("LISTEN_PID") && !std::getenv("LISTEN_FDS") && !std::getenv("LISTEN_FDNAMES");
}

TEST(HttpSocketActivation, TakesThePassedSocketAndClearsTheEnvironment) {
  std::uint16_t port = 0;
  const int fd = tcp_socket(true, port);
  const int rc = in_child(fd, nullptr, "1", [&] {
    auto r = take_activated_sockets();
    if (!r.error.empty() || r.sockets.size() != 1) return 1;
    if (r.sockets[0].fd != 3 || r.sockets[0].family != AF_INET) return 2;
    if (r.sockets[0].address.describe() != "127.0.0.1:" + std::to_string(port)) return 3;
    if (!(::fcntl(3, F_GETFD) & FD_CLOEXEC)) return 4;  // not leaked to children
    if (!env_cleared()) return 5;
    return 0;
  });
  EXPECT_EQ(rc, 0);
  ::close(fd);
}

TEST(HttpSocketActivation, ForAnotherProcessTakesNothingButStillClears) {
  std::uint16_t port = 0;
  const int fd = tcp_socket(true, port);
  const int rc = in_child(fd, "1", "1", [] {  // pid 1 is never the child
    auto r = take_activated_sockets();
    if (!r.error.empty() || !r.sockets.empty()) return 1;
    return env_cleared() ? 0 : 2;
  });
  EXPECT_EQ(rc, 0);
  ::close(fd);
}

TEST(HttpSocketActivation, MissingOrWrongFdsAreErrors) {
  int rc = in_child(-1, nullptr, "1", [] {
    auto r = take_activated_sockets();
    if (r.error.find("fd 3 passed by socket activation is not open") == std::string::npos) return 1;
    return r.sockets.empty() && env_cleared() ? 0 : 2;
  });
  EXPECT_EQ(rc, 0);
  // Two announced, only fd 3 is a listener (fd 4 is closed or whatever the child has there).
  std::uint16_t port = 0;
  const int fd = tcp_socket(true, port);
  rc = in_child(fd, nullptr, "2", [] {
    ::close(4);
    auto r = take_activated_sockets();
    if (r.error.find("fd 4") == std::string::npos) return 1;
    return r.sockets.empty() ? 0 : 2;  // all or nothing
  });
  EXPECT_EQ(rc, 0);
  ::close(fd);
}

}  // namespace
}  // namespace tandem::http
