// The `cachealloc` command-line tool: each command's word, its one-line
// summary and the function that runs it (lab/cli/lab_commands.h), nothing
// else.
//
//   cachealloc replay TRACE ...                      (lab/cli/lab_replay.cc)
//   cachealloc compare TRACE --conf A --conf B ...   (lab/cli/lab_compare.cc)
//   cachealloc min-memory TRACE --conf A ...         (lab/cli/lab_min_memory.cc)
//   cachealloc advise TRACE [--memory-limit BYTES]   (lab/cli/lab_advise.cc)
//   cachealloc explain SNAPSHOT                      (lab/cli/lab_explain.cc)
//
// The `cachealloc` command pip installs (bindings/python/cachealloc/cli.py)
// lists these commands with the same summaries beside its own (run,
// predict, report, doctor); tests/python/test_command.py checks that the
// two lists agree.
//
// Exit status: the command's (replay: 0 clean replay, 1 divergence); 0 for
// --help; 2 bad input (no command, an unknown one, usage, unreadable or
// malformed trace, bad config).
#include <algorithm>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab/cli/command_line.h"
#include "lab/cli/lab_commands.h"

namespace cachealloc {
namespace {

// The commands, by the word that names them, in the order the help lists them.
struct Command {
  const char* word;
  const char* summary;  // one line, under 64 characters
  int (*run)(const std::vector<std::string>& args);
};
constexpr Command kCommands[] = {
    {"replay", "replay a trace on the engine, checked event by event", replay_main},
    {"compare", "what-if replays of a trace under several configs", compare_main},
    {"min-memory", "the smallest memory limit a trace runs in without OOM", min_memory_main},
    {"advise", "which allocator settings to use for a trace", advise_main},
    {"explain", "why a snapshot ran out of memory, and what would avoid it", explain_main},
};

// The tool's own help: the commands, one line each, then where each
// command's options are.
std::string usage() {
  std::string s =
      "usage: cachealloc COMMAND [ARGS...]\n"
      "\n"
      "The compiled tool: a recorded trace replayed on cachealloc's engine.\n"
      "\n"
      "commands:\n";
  for (const Command& c : kCommands) {
    std::string word = c.word;
    word.resize(std::max<size_t>(word.size() + 2, 12), ' ');
    s += "  " + word + c.summary + "\n";
  }
  s += "\n"
       "`cachealloc COMMAND --help` shows a command's options. The `cachealloc`\n"
       "command that pip installs adds predict, run, report and doctor.\n";
  return s;
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  using namespace cachealloc;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // No command, -h and --help: the same text on stdout; no command is
    // still a usage error (exit 2), as a script that meant one wants to know.
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
      std::cout << usage();
      return args.empty() ? 2 : 0;
    }
    std::vector<std::string> words;
    for (const Command& c : kCommands) {
      if (args[0] == c.word) return c.run({args.begin() + 1, args.end()});
      words.push_back(c.word);
    }
    const std::string near = nearest_word(words, args[0]);
    std::cerr << "cachealloc: unknown command '" << args[0] << "'"
              << (near.empty() ? "" : " (did you mean " + near + "?)") << "\n\n"
              << usage();
  } catch (const std::bad_alloc&) {
    // Anything that ran out of memory without saying so itself.
    std::cerr << "cachealloc: out of memory while " << activity()
              << " (this process could not allocate more host memory)\n";
  } catch (const std::exception& e) {
    std::cerr << "cachealloc: " << e.what() << "\n";
  }
  return 2;
}
