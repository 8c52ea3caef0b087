// The `cachealloc` command-line tool: each command's word and the function
// that runs it (lab/cli/lab_commands.h), nothing else.
//
//   cachealloc replay TRACE ...                      (lab/cli/lab_replay.cc)
//   cachealloc compare TRACE --conf A --conf B ...   (lab/cli/lab_compare.cc)
//   cachealloc min-memory TRACE --conf A ...         (lab/cli/lab_min_memory.cc)
//   cachealloc advise TRACE [--memory-limit BYTES]   (lab/cli/lab_advise.cc)
//   cachealloc explain SNAPSHOT                      (lab/cli/lab_explain.cc)
//
// Exit status: the command's (replay: 0 clean replay, 1 divergence); 2 bad
// input (usage, unreadable or malformed trace, bad config).
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab/cli/command_line.h"
#include "lab/cli/lab_commands.h"

namespace cachealloc {
namespace {

struct BadUsage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The commands, by the word that names them.
struct Command {
  const char* word;
  int (*run)(const std::vector<std::string>& args);
};
constexpr Command kCommands[] = {
    {"replay", replay_main},
    {"compare", compare_main},
    {"min-memory", min_memory_main},
    {"advise", advise_main},
    {"explain", explain_main},
};

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  using namespace cachealloc;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
      std::cout << replay_usage();
      return args.empty() ? 2 : 0;
    }
    std::vector<std::string> words;
    for (const Command& c : kCommands) {
      if (args[0] == c.word) return c.run({args.begin() + 1, args.end()});
      words.push_back(c.word);
    }
    const std::string near = nearest_word(words, args[0]);
    throw BadUsage("unknown command '" + args[0] + "'" +
                   (near.empty() ? "" : " (did you mean " + near + "?)"));
  } catch (const BadUsage& e) {
    std::cerr << "cachealloc: " << e.what() << "\n\n" << replay_usage();
  } catch (const std::bad_alloc&) {
    // Anything that ran out of memory without saying so itself.
    std::cerr << "cachealloc: out of memory while " << activity()
              << " (this process could not allocate more host memory)\n";
  } catch (const std::exception& e) {
    std::cerr << "cachealloc: " << e.what() << "\n";
  }
  return 2;
}
