// Typed requests of tandem/client.h packed into tandem-protocol(7) frames: a u32 big-endian length
// and one msgpack map carrying the request's id and op. Unset optionals are left out.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/client.h"

namespace tandem::client::wire {

std::string encode_hello(std::uint64_t id, const std::string& client_name);
// Always streamed (stream=true): the library hands out pieces as they come.
std::string encode_generate(std::uint64_t id, const generate_request& r);
std::string encode_cancel(std::uint64_t id, std::uint64_t target);
std::string encode_tokenize(std::uint64_t id, const tokenize_request& r);
std::string encode_detokenize(std::uint64_t id, const detokenize_request& r);
std::string encode_models(std::uint64_t id);
std::string encode_status(std::uint64_t id);
std::string encode_load(std::uint64_t id, const load_request& r);
std::string encode_swap(std::uint64_t id, const swap_request& r);
std::string encode_unload(std::uint64_t id, const std::string& name);

}  // namespace tandem::client::wire
