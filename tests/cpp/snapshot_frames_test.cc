// SnapshotFrames: a snapshot holds each distinct stack and frame once and
// shares the contexts' strings (stats/snapshot_frames.h says why).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "allocator/base/call_context.h"
#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "stats/snapshot.h"
#include "stats/snapshot_frames.h"

namespace cachealloc {
namespace {

ContextPtr stack(std::initializer_list<StackFrame> frames) {
  return std::make_shared<CallContext>(CallContext{frames, nullptr});
}

TEST(SnapshotFrames, OneContextIsOneListWhoeverHoldsIt) {
  SnapshotFrames frames;
  const ContextPtr ctx = stack({{"f", "x.py", 1}, {"g", "x.py", 2}});
  const PyValue a = frames.list(ctx);
  const PyValue b = frames.list(ctx);
  EXPECT_EQ(&a.items(), &b.items());
  ASSERT_EQ(a.items().size(), 2u);
  EXPECT_EQ(a.items()[1].at("name").as_str(), "g");
  EXPECT_EQ(a.items()[1].at("filename").as_str(), "x.py");
  EXPECT_EQ(a.items()[1].at("line").as_int(), 2);
  // Another context with the same frames is another list (as native: one
  // list per traceback object).
  EXPECT_NE(&frames.list(stack({{"f", "x.py", 1}, {"g", "x.py", 2}})).items(), &a.items());
  // No context: an empty list of its own.
  EXPECT_TRUE(frames.list(nullptr).items().empty());
  EXPECT_NE(&frames.list(nullptr).items(), &frames.list(nullptr).items());
}

TEST(SnapshotFrames, FramesSharingTheirTextAndLineAreOneDict) {
  const SharedString name(std::string(100000, 'n')), file("x.py");
  const ContextPtr one = stack({{name, file, 1}, {name, file, 1}, {name, file, 2}});
  const ContextPtr two = stack({{name, file, 2}});
  SnapshotFrames frames;
  const PyValue a = frames.list(one), b = frames.list(two);
  EXPECT_EQ(&a.items()[0].as_dict(), &a.items()[1].as_dict());
  EXPECT_NE(&a.items()[0].as_dict(), &a.items()[2].as_dict());  // another line
  EXPECT_EQ(&a.items()[2].as_dict(), &b.items()[0].as_dict());
  // The text is the context's own box, not a copy.
  EXPECT_EQ(&a.items()[0].at("name").as_str(), &name.str());
  EXPECT_EQ(&b.items()[0].at("filename").as_str(), &file.str());
  // frames_to_py alone shares within the one stack too.
  const PyValue alone = frames_to_py(one);
  EXPECT_EQ(&alone.items()[0].as_dict(), &alone.items()[1].as_dict());
}

TEST(SnapshotFrames, PickleHoldsASharedNameOnceAndReadsBackEqual) {
  // 1000 frames naming one 100 kB string: the pickle holds the string once,
  // one dict per distinct frame and a 2-byte reference per repeat.
  const SharedString name(std::string(100000, 'n')), file("x.py");
  auto ctx = std::make_shared<CallContext>();
  for (int i = 0; i < 1000; ++i) ctx->frames.push_back({name, file, i % 2});
  const PyValue list = SnapshotFrames().list(ctx);
  const std::string bytes = write_pickle(list);
  EXPECT_LT(bytes.size(), 100000u + 2200u);
  const PyValue back = read_pickle(bytes);
  EXPECT_EQ(back, list);
  EXPECT_EQ(back.items()[999].at("line").as_int(), 1);
}

}  // namespace
}  // namespace cachealloc
