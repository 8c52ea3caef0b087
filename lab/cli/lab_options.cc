#include "lab/cli/lab_options.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "allocator/base/errors.h"
#include "allocator/policy/policy_registry.h"
#include "lab/cli/lab_args.h"

namespace cachealloc {

LabCommonArgs parse_lab_args(const std::string& command, const std::vector<std::string>& args,
                             const LabOwnOptions& own_options) {
  LabCommonArgs c;
  Positional trace;
  CLI::App app{"", command};
  configure_command_line(app);
  add_trace_positional(app, trace);
  add_list_option(app, "--conf", c.confs);
  add_bytes_option(app, "--recorded-limit", c.input.recorded_limit);
  app.add_option_function<std::string>("--device", [&c](const std::string& text) {
    c.input.device = parse_lab_device("--device", text);
  });
  app.add_flag("--json", c.json);
  app.add_flag_callback("--no-address-hints", [&c] { c.address_hints = false; });
  app.add_option_function<std::string>("--placement", [&c](const std::string& text) {
    try {
      c.placement = parse_segment_placement(text);
    } catch (const std::invalid_argument& e) {
      throw LabUsageError(std::string("--placement: ") + e.what());
    }
  });
  app.add_flag("--quiet", c.input.quiet);
  app.add_flag("--progress", c.input.progress);
  app.add_option("--policy", c.policy);
  if (own_options) own_options(app);
  parse_command_line(app, args);
  c.trace = trace.only_trace();
  try {
    check_policy_name(c.policy);
  } catch (const ConfigError& e) {
    throw LabUsageError(std::string("--policy: ") + e.what());
  }
  if (c.confs.empty()) c.confs.push_back("trace");
  return c;
}

void warn_gc_without_limit(const std::string& command, const std::string& label,
                           double threshold) {
  if (!(threshold > 0.0)) return;
  std::cerr << "cachealloc " << command << ": warning: '" << label
            << "' sets garbage_collection_threshold, which does nothing here: without "
               "--memory-limit there is no limit to collect under (native PyTorch frees cached "
               "blocks for it only once reserved memory passes that share of the "
               "set_per_process_memory_fraction limit)\n";
}

int run_lab_command(const std::string& command, const char* usage,
                    const std::vector<std::string>& args, const std::function<int()>& run) {
  try {
    for (const std::string& a : args)
      if (a == "-h" || a == "--help") {
        std::cout << usage;
        return 0;
      }
    set_activity("starting cachealloc " + command);
    return run();
  } catch (const LabUsageError& e) {
    std::cerr << "cachealloc " << command << ": " << e.what() << "\n\n" << usage;
    return 2;
  }
}

}  // namespace cachealloc
