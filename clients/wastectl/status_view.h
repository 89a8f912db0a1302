// wastectl's two forms of a status: text for people (80 columns) and JSON
// for programs, with the derived numbers (rates, throughput, precision,
// recall) computed once here for both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/status.h"

namespace waste::ctl {

// "12.3 s", "4m 05s", "2h 03m", "3d 04h".
std::string Duration(double seconds);
// Hits over demands (hits + late + misses); nothing before the first demand.
// A late record is not a hit: the demand found its read still under way.
std::optional<double> HitRate(uint64_t hits, uint64_t late, uint64_t misses);
// Late over demands, likewise.
std::optional<double> LateRate(uint64_t hits, uint64_t late, uint64_t misses);
// "95.2%", or "-" for nothing.
std::string Percent(std::optional<double> rate);
// `text` cut to `width` columns, ending in "..." when cut.
std::string Fit(const std::string& text, size_t width);
// Rows as right-aligned columns sized to their widest cell, two spaces
// apart; the last column is left-aligned and cut so a line fits `width`.
std::vector<std::string> Table(const std::vector<std::vector<std::string>>& rows, size_t width);

nlohmann::json StatusJson(const DaemonStatus& s, const std::string& socket);
nlohmann::json ClientsJson(const DaemonStatus& s);
std::string StatusText(const DaemonStatus& s, const std::string& socket, size_t width = 80);
// The clients table (a header row, then one row per client). `compact`, for
// the views that share 80 columns with the command: the command's program
// goes by its name, not its path, and the hit rate (hits over hits + late +
// misses, all shown) is left out.
std::vector<std::vector<std::string>> ClientRows(const DaemonStatus& s, bool compact);
// "/usr/bin/waste run x" -> "waste run x".
std::string ShortCommand(const std::string& command);

}  // namespace waste::ctl
