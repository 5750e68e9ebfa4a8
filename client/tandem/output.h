// Output helpers shared by the commands: JSON lines for --json, sizes and durations for people,
// and a plain aligned table.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::client {

// One compact JSON object and a newline on stdout, flushed (scripts read it as it comes).
void print_json_line(const nlohmann::json& j);
// The same for JSON text already rendered (libtandem-client's result_json and replies).
void print_json_text(std::string_view text);

// 1536 → "1.5 KiB".
std::string human_bytes(std::uint64_t n);

// 3725 → "1h 2m 5s"; fractions below 10 s keep one decimal.
std::string human_duration(double seconds);

// A load's figures in decimal units, as disk and link speeds are quoted: 3.1e9 → "3.1 GB",
// 2.45e10 → "24.5 GB/s"; done of total in the total's unit: "3.1 / 8.7 GB"; its seconds with
// the digits that matter: "4 ms", "0.36 s", "12.3 s".
std::string decimal_bytes(std::uint64_t n);
std::string decimal_rate(double bytes_per_second);
std::string bytes_of_total(std::uint64_t done, std::uint64_t total);
std::string load_seconds(double seconds);

// Prints rows with each column padded to its widest cell; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace tandem::client
