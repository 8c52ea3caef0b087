#include "lab/cli/command_line.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <limits>
#include <utility>

#include "lab/cli/lab_args.h"
#include "pickle/byte_size.h"

namespace cachealloc {
namespace {

// Edits (insert, delete, replace) turning `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string& current_activity() {
  static std::string what = "starting";
  return what;
}

}  // namespace

void configure_command_line(CLI::App& app) {
  app.set_help_flag("");  // -h/--help print the subcommand's own usage first
  app.allow_extras();     // unknown options: named by parse_command_line
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void add_text_option(CLI::App& app, const std::string& name, std::optional<std::string>& into) {
  app.add_option_function<std::string>(name, [&into](const std::string& text) { into = text; });
}

void add_bytes_option(CLI::App& app, const std::string& name, std::optional<size_t>& into) {
  app.add_option_function<std::string>(name, [name, &into](const std::string& text) {
    std::string problem;
    const std::optional<uint64_t> v = parse_byte_size(text, problem);
    if (!v) {
      throw LabUsageError(name + " value '" + text + "' " + problem + ": give bytes " +
                          kByteSizeExamples);
    }
    if (*v > std::numeric_limits<size_t>::max())
      throw LabUsageError(name + " value '" + text + "' is too large");
    into = static_cast<size_t>(*v);
  });
}

void add_count_option(CLI::App& app, const std::string& name, std::optional<size_t>& into) {
  app.add_option_function<std::string>(
      name, [name, &into](const std::string& text) { into = parse_lab_count(name, text); });
}

void add_list_option(CLI::App& app, const std::string& name, std::vector<std::string>& into) {
  app.add_option(name, into)
      ->allow_extra_args(false)  // one value per use: the next word may be TRACE
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

const std::string& Positional::only_trace() const {
  if (words.empty()) throw LabUsageError("no TRACE given");
  if (words.size() > 1) throw LabUsageError("more than one TRACE given");
  return words.front();
}

void add_trace_positional(CLI::App& app, Positional& into) {
  app.add_option("TRACE", into.words)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

std::string nearest_word(const std::vector<std::string>& candidates, const std::string& typed) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = c.starts_with(typed) && typed.size() > 3 ? 0 : edit_distance(typed, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best_distance <= 1 + typed.size() / 4 ? best : "";
}

std::string nearest_option(const CLI::App& app, const std::string& unknown) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& lname : option->get_lnames()) names.push_back("--" + lname);
  return nearest_word(names, unknown.substr(0, unknown.find('=')));
}

void parse_command_line(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--conf: 1 required TEXT missing": the option's value is missing.
    const std::string what = e.what();
    const size_t colon = what.find(':');
    if (colon != std::string::npos && what.find("missing") != std::string::npos)
      throw LabUsageError(what.substr(0, colon) + " needs a value");
    throw LabUsageError(what);
  } catch (const CLI::ParseError& e) {
    throw LabUsageError(e.what());
  }
  for (const std::string& word : app.remaining()) {
    if (word.size() > 1 && word[0] == '-') {
      const std::string near = nearest_option(app, word);
      throw LabUsageError("unknown option " + word +
                          (near.empty() ? "" : " (did you mean " + near + "?)"));
    }
  }
  if (!app.remaining().empty()) throw LabUsageError("unexpected argument " + app.remaining().front());
}

void set_activity(std::string what) { current_activity() = std::move(what); }
const std::string& activity() { return current_activity(); }

}  // namespace cachealloc
