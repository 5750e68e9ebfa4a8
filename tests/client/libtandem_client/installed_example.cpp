// Built by install_test.sh against the INSTALLED tandem/client.h and libtandem-client.so only
// (pkg-config), as an integrator would: it proves the header needs nothing else.
#include <tandem/client.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto c = tandem::client::connection::connect(argv[1]);
  if (c.ok()) {
    auto s = c->status();
    std::printf("%s\n", s.ok() ? s->version.c_str() : tandem::client::to_string(s.err()).c_str());
    return 0;
  }
  // What install_test.sh expects for a socket nobody listens on.
  std::printf("%s\n", c.err().message.c_str());
  return c.err().kind == tandem::client::error_kind::connect ? 3 : 1;
}
