// sandbox_exec: runs a command under the system-call policy of packaging/tandemd.service, without
// systemd (the GPU machine has none): no_new_privs, an allow list (SystemCallFilter=, as a flat
// file of names), socket() for AF_UNIX only (RestrictAddressFamilies=AF_UNIX), optionally a new
// network namespace (PrivateNetwork=). A call outside the list fails with EPERM as under the unit
// (SystemCallErrorNumber=EPERM), and is also named on stderr once, so a failure can be traced.
// Signals to sandbox_exec go on to the command, so it can stand in for it under a supervisor.
// Build: g++ -O2 -std=c++17 scripts/sandbox_exec.cpp -l:libseccomp.a -o sandbox_exec
// Usage: sandbox_exec [--netns] SYSCALL_LIST_FILE COMMAND [ARGS...]   (exit status: the command's)
#include <seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

namespace {

// SCM_RIGHTS: the child's notification descriptor to the parent.
bool send_fd(int sock, int fd) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov, msg.msg_iovlen = 1, msg.msg_control = ctl, msg.msg_controllen = sizeof ctl;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, 0) == 1;
}

int recv_fd(int sock) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov, msg.msg_iovlen = 1, msg.msg_control = ctl, msg.msg_controllen = sizeof ctl;
  if (recvmsg(sock, &msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

// The filter: the listed calls allowed, socket() for AF_UNIX only, everything else to the parent
// (user notification), which answers EPERM.
scmp_filter_ctx make_filter(const char* list) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_NOTIFY);
  if (!ctx) return nullptr;
  std::ifstream in(list);
  int allowed = 0;
  for (std::string name; std::getline(in, name);) {
    if (name.empty() || name == "socket") continue;
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0) ++allowed;
  }
  seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
  seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  std::fprintf(stderr, "sandbox_exec: %d system calls allowed (%s)\n", allowed, list);
  return allowed > 0 ? ctx : nullptr;
}

// Answers every notification with EPERM, naming each call the first time, until the child exits.
void serve_notifications(int nfd, pid_t child) {
  seccomp_notif* req = nullptr;
  seccomp_notif_resp* resp = nullptr;
  if (seccomp_notify_alloc(&req, &resp) != 0) return;
  std::set<int> named;
  for (;;) {
    pollfd pfd{nfd, POLLIN, 0};
    const int n = poll(&pfd, 1, 200);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0 || !(pfd.revents & POLLIN)) {
      // No user left of the filter (POLLHUP), or the command is done.
      siginfo_t info{};
      if ((pfd.revents & POLLHUP) || (waitid(P_PID, child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child))
        break;
      continue;
    }
    if (seccomp_notify_receive(nfd, req) != 0) continue;
    if (named.insert(req->data.nr).second) {
      char* name = seccomp_syscall_resolve_num_arch(req->data.arch, req->data.nr);
      std::fprintf(stderr, "sandbox_exec: denied %s (pid %d)\n", name ? name : "?", req->pid);
      std::free(name);
    }
    resp->id = req->id, resp->val = 0, resp->error = -EPERM, resp->flags = 0;
    seccomp_notify_respond(nfd, resp);
  }
  seccomp_notify_free(req, resp);
}

pid_t g_child = 0;

// The parent stands in for the command (a service manager signals it): signals go on to the child.
void forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

}  // namespace

int main(int argc, char** argv) {
  int a = 1;
  const bool netns = argc > a && std::strcmp(argv[a], "--netns") == 0;
  if (netns) ++a;
  if (argc - a < 2) {
    std::fprintf(stderr, "usage: sandbox_exec [--netns] SYSCALL_LIST_FILE COMMAND [ARGS...]\n");
    return 2;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    if (netns && unshare(CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "sandbox_exec: unshare(CLONE_NEWNET): %s\n", std::strerror(errno));
      _exit(125);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(125);
    scmp_filter_ctx ctx = make_filter(argv[a]);
    if (!ctx || seccomp_load(ctx) != 0) {
      std::fprintf(stderr, "sandbox_exec: the filter did not load\n");
      _exit(125);
    }
    if (!send_fd(sv[1], seccomp_notify_fd(ctx))) _exit(125);
    close(sv[1]);
    execvp(argv[a + 1], argv + a + 1);
    std::fprintf(stderr, "sandbox_exec: exec %s: %s\n", argv[a + 1], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  struct sigaction sa{};
  sa.sa_handler = forward;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  close(sv[1]);
  const int nfd = recv_fd(sv[0]);
  if (nfd >= 0) serve_notifications(nfd, pid);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
