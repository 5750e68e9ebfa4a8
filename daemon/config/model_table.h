// The [model.NAME] tables of tandemd.toml (tandemd.conf(5)): per-model settings, read beside
// CLI11's TOML reader, which maps sections onto subcommands and knows only top-level keys here.
#pragma once

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/model_settings.h"

namespace tandem::daemon {

struct model_table {
  std::string name;  // the alias
  int line = 0;      // of its [model.NAME] header
  std::optional<std::string> path;
  proto::model_settings settings;
};

// What the tables of one file held, or the first thing wrong with them.
struct model_tables_read {
  std::vector<model_table> tables;  // in file order
  std::vector<std::string> listed;  // aliases the file's top-level `model` key names
  int error_line = 0;
  std::string error;  // "[model.big]: unknown key 'contxt'; ..."; empty: none
};

// Splits `in` into the tables (into `out`) and the rest, which comes back as text with each table
// line blanked, so that CLI11 reads the top-level keys as before.
std::string take_model_tables(std::istream& in, model_tables_read& out);

// CLI11's TOML reader after take_model_tables; `out` is filled on each read of a file.
class model_table_config : public CLI::ConfigTOML {
 public:
  explicit model_table_config(std::shared_ptr<model_tables_read> out) : out_(std::move(out)) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override;

 private:
  std::shared_ptr<model_tables_read> out_;
};

// A gpus list as tandemd takes it: CUDA ids, each with an optional cap (0,1 or 0=16GiB,1=32GiB);
// an error naming the list, e.g. "gpus 'v100-16gb': ...".
std::optional<std::string> check_gpu_list(const std::string& gpus);

// The device list (check_gpu_list) and the ratios (the memory plan's parser): an error naming the
// field, e.g. "gpus '0,x': ...". Other fields are checked where they are read.
std::optional<std::string> check_device_fields(const proto::model_settings& s);

// The one of `keys` within two edits of `key` ("contxt" → "context"), for "did you mean"; or "".
std::string nearest_key(const std::string& key, const std::vector<std::string>& keys);

}  // namespace tandem::daemon
