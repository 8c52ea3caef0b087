// An immutable string shared by reference count, for the text of stack
// frames: a copy costs an atomic increment, not the bytes.
//
// Why: frames repeat a few thousand distinct names and file names millions
// of times (every captured stack, every recorded trace entry), and a
// snapshot pickle can reference one string from any number of frames for 2
// bytes each. Frames that hold the same SharedString cost one copy of the
// text, so memory follows the distinct strings, not the references.
//
// Invariant: the text never changes after construction (every holder may
// read it without a lock).
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace cachealloc {

class SharedString {
 public:
  // The empty string; allocates nothing.
  SharedString() = default;
  // A new box holding `text` (one allocation). Implicit, as a std::string
  // member was: StackFrame{"f", "x.py", 1} keeps compiling.
  SharedString(std::string text)
      : box_(std::make_shared<const std::string>(std::move(text))) {}
  SharedString(const char* text) : SharedString(std::string(text)) {}
  // Shares `box` (as the pickle reader's strings are shared); null is "".
  explicit SharedString(std::shared_ptr<const std::string> box) : box_(std::move(box)) {}

  // The text; valid while this or any copy lives.
  const std::string& str() const { return box_ ? *box_ : empty(); }
  // The shared box, never null (the empty string has one box for all).
  std::shared_ptr<const std::string> box() const { return box_ ? box_ : empty_box(); }

 private:
  static const std::string& empty() {
    static const std::string text;
    return text;
  }
  static const std::shared_ptr<const std::string>& empty_box() {
    // Leaked on purpose: usable during static destruction.
    static const auto* box =
        new std::shared_ptr<const std::string>(std::make_shared<const std::string>());
    return *box;
  }

  std::shared_ptr<const std::string> box_;  // null for ""
};

}  // namespace cachealloc
