// Reply ids: random, not sequential, so that they reveal nothing about other clients' requests.
#include "http_context.h"

#include <cstdio>

namespace tandem::http {

std::string http_context::reply_id(const char* prefix) {
  char hex[25];
  std::snprintf(hex, sizeof hex, "%012llx%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL),
                static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return std::string(prefix) + hex;
}

}  // namespace tandem::http
