#include "lab/cli/lab_options.h"

#include <iostream>

#include "lab/cli/lab_args.h"

namespace cachealloc {

LabCommonArgs parse_lab_args(const std::vector<std::string>& args,
                             const LabOwnOptions& own_options) {
  LabCommonArgs c;
  bool have_trace = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const LabOptionValue value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw LabUsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "--conf") c.confs.push_back(value());
    else if (a == "--recorded-limit") c.input.recorded_limit = parse_lab_bytes(a, value());
    else if (a == "--device") c.input.device = parse_lab_device(a, value());
    else if (a == "--json") c.json = true;
    else if (a == "--no-address-hints") c.address_hints = false;
    else if (a == "--quiet") c.input.quiet = true;
    else if (a == "--progress") c.input.progress = true;
    else if (own_options && own_options(a, value)) continue;
    else if (!a.empty() && a[0] == '-') throw LabUsageError("unknown option " + a);
    else if (have_trace) throw LabUsageError("more than one TRACE given");
    else c.trace = a, have_trace = true;
  }
  if (!have_trace) throw LabUsageError("no TRACE given");
  if (c.confs.empty()) c.confs.push_back("trace");
  return c;
}

int run_lab_command(const std::string& command, const char* usage,
                    const std::vector<std::string>& args, const std::function<int()>& run) {
  try {
    for (const std::string& a : args)
      if (a == "-h" || a == "--help") {
        std::cout << usage;
        return 0;
      }
    return run();
  } catch (const LabUsageError& e) {
    std::cerr << "cachealloc " << command << ": " << e.what() << "\n\n" << usage;
    return 2;
  }
}

}  // namespace cachealloc
