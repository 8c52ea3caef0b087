// The options every fragmentation-lab subcommand (compare, min-memory)
// takes, parsed in one place so that they accept and reject them alike, and
// the usage-error handling around a subcommand's body.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lab/cli/lab_input.h"

namespace cachealloc {

// TRACE and the shared options:
//   --conf TEXT (repeatable), --recorded-limit BYTES, --device N, --json,
//   --no-address-hints, --quiet, --progress.
struct LabCommonArgs {
  std::string trace;
  std::vector<std::string> confs;  // in order given; {"trace"} when none
  LabInputOptions input;           // --device, --recorded-limit, --quiet, --progress
  bool json = false;
  bool address_hints = true;  // false with --no-address-hints
};

// Takes the value of the option being read: the next argument. Throws
// LabUsageError("OPTION needs a value") when there is none.
using LabOptionValue = std::function<const std::string&()>;
// A subcommand's own options: handles `option` (calling value() for its
// value) and returns true, or returns false for an option it does not take.
using LabOwnOptions =
    std::function<bool(const std::string& option, const LabOptionValue& value)>;

// Reads `args` (the words after the subcommand's name) left to right: the
// shared options, then those `own_options` takes; any other word starting
// with '-' is an unknown option, any other word is TRACE. Throws
// LabUsageError naming the option for an unknown option or a missing or bad
// value, and for no TRACE or more than one.
LabCommonArgs parse_lab_args(const std::vector<std::string>& args,
                             const LabOwnOptions& own_options = nullptr);

// A subcommand's main: prints `usage` on stdout and returns 0 when `args`
// hold -h or --help (anywhere); else returns run(). A LabUsageError from
// run() is printed as "cachealloc COMMAND: MESSAGE", a blank line and
// `usage` on stderr, and returns 2. Other exceptions propagate.
int run_lab_command(const std::string& command, const char* usage,
                    const std::vector<std::string>& args, const std::function<int()>& run);

}  // namespace cachealloc
