// The options every fragmentation-lab subcommand (compare, min-memory)
// takes, parsed in one place so that they accept and reject them alike, and
// the usage-error handling around a subcommand's body.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lab/cli/command_line.h"
#include "lab/cli/lab_input.h"
#include "lab/whatif_device.h"

namespace cachealloc {

// TRACE and the shared options:
//   --conf TEXT (repeatable), --recorded-limit BYTES, --device N, --json,
//   --no-address-hints, --placement P, --quiet, --progress, --policy NAME.
struct LabCommonArgs {
  std::string trace;
  std::vector<std::string> confs;  // in order given; {"trace"} when none
  LabInputOptions input;           // --device, --recorded-limit, --quiet, --progress
  bool json = false;
  bool address_hints = true;  // false with --no-address-hints
  // --placement first-fit|top-down (WhatIfDevice): where segments go
  // without a hint.
  SegmentPlacement placement = SegmentPlacement::kFirstFit;
  // --policy NAME: the placement policy of every config that names none
  // (allocator/policy/policy_registry.h); checked here, so an unknown name
  // is a usage error naming the known ones.
  std::string policy = "native";
};

// Adds a subcommand's own options to its parser (command_line.h).
using LabOwnOptions = std::function<void(CLI::App& app)>;

// Reads `args` (the words after the subcommand's name) with one CLI11
// parser: the shared options, those `own_options` adds, and TRACE. Throws
// LabUsageError naming the option for an unknown option (suggesting the
// nearest), a missing or bad value, and for no TRACE or more than one.
LabCommonArgs parse_lab_args(const std::string& command, const std::vector<std::string>& args,
                             const LabOwnOptions& own_options = nullptr);

// Says on stderr, as "cachealloc COMMAND: warning: ...", that `label`'s
// garbage_collection_threshold (when > 0) does nothing in a run without a
// memory limit: native PyTorch collects cached blocks only when a memory
// fraction is set, once reserved memory passes that share of the limit.
void warn_gc_without_limit(const std::string& command, const std::string& label,
                           double threshold);

// A subcommand's main: prints `usage` on stdout and returns 0 when `args`
// hold -h or --help (anywhere); else returns run(). A LabUsageError from
// run() is printed as "cachealloc COMMAND: MESSAGE", a blank line and
// `usage` on stderr, and returns 2. Other exceptions propagate.
int run_lab_command(const std::string& command, const char* usage,
                    const std::vector<std::string>& args, const std::function<int()>& run);

}  // namespace cachealloc
