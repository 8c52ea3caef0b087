// How every subcommand of the `cachealloc` tool (replay, compare,
// min-memory) reads its words: one CLI11 parser set up alike, so that they
// take `--opt value` and `--opt=value`, byte sizes in one grammar
// (pickle/byte_size.h: 40GiB, 1.5GiB, 2e9, plain bytes), a repeated option's
// last value, and answer a mistyped option with the nearest real one.
//
// Each subcommand prints its own usage text (CLI11's help is off): usage
// errors come out as LabUsageError, which the subcommand turns into its
// message, its usage and exit status 2.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace cachealloc {

// Sets up `app` (CLI::App app{"", "compare"}): no CLI11 help, unknown
// options kept for parse_command_line to name, a repeated option's last
// value wins (as the tool's hand-written parser had it).
void configure_command_line(CLI::App& app);

// An option taking any text.
void add_text_option(CLI::App& app, const std::string& name, std::optional<std::string>& into);

// An option taking a byte count (pickle/byte_size.h) that fits in size_t.
// A bad value is a LabUsageError naming the option and the value.
void add_bytes_option(CLI::App& app, const std::string& name, std::optional<size_t>& into);
// An option taking a count of things (decimal digits only).
void add_count_option(CLI::App& app, const std::string& name, std::optional<size_t>& into);
// A repeatable option collecting one value per use, in order.
void add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& into);

// The words that are not options (TRACE): exactly one is required, else a
// LabUsageError "no TRACE given" / "more than one TRACE given".
struct Positional {
  std::vector<std::string> words;
  const std::string& only_trace() const;
};
void add_trace_positional(CLI::App& app, Positional& into);

// Parses `args` (the words after the subcommand's name). Throws
// LabUsageError for an unknown option (with "did you mean --x?" when a
// real one is near), an option without its value, or a bad value.
void parse_command_line(CLI::App& app, const std::vector<std::string>& args);

// The long option of `app` nearest to `unknown` ("--memry-limit" ->
// "--memory-limit"; "--memory-limit=1" is read as its name), or "" when
// none is close enough to be a typo.
std::string nearest_option(const CLI::App& app, const std::string& unknown);
// The candidate nearest to `typed`: a few edits for its length, or a
// shortening of it (longer than 3 characters); "" when none is.
std::string nearest_word(const std::vector<std::string>& candidates, const std::string& typed);

// What the tool is doing now ("reading t.pickle.gz", "replaying config
// 2/3 'x'"), for the message when memory runs out: std::bad_alloc says
// nothing of where. Each step sets it; main() reports it.
void set_activity(std::string what);
const std::string& activity();

}  // namespace cachealloc
