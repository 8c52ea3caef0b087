// Tests of the plain-data pickle layer: PyValue, write_pickle, read_pickle.
//
// Byte literals of Python pickles below were produced by CPython 3.11's
// pickle.dumps; each test names the rule it checks.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "pickle/py_value.h"

namespace cachealloc {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;
using Kind = PyValue::Kind;

// Python: {'a': [1, -1, 300, 70000, -70000, 2**40, -2**63, 2**63-1], 'f': 1.5,
//          't': (1, 2, 3, 4), 'u': 'héllo ✓', 'n': None, 'b': [True, False],
//          'e': [(), {}, []], (1, 'x'): 'tuplekey', 5: 'intkey'}
PyValue python_sample() {
  PyValue d = PyValue::dict();
  d.set("a", PyValue::list({PyValue::integer(1), PyValue::integer(-1), PyValue::integer(300),
                            PyValue::integer(70000), PyValue::integer(-70000),
                            PyValue::integer(int64_t{1} << 40),
                            PyValue::integer(std::numeric_limits<int64_t>::min()),
                            PyValue::integer(std::numeric_limits<int64_t>::max())}));
  d.set("f", PyValue::floating(1.5));
  d.set("t", PyValue::tuple({PyValue::integer(1), PyValue::integer(2), PyValue::integer(3),
                             PyValue::integer(4)}));
  d.set("u", PyValue::str("h\xc3\xa9llo \xe2\x9c\x93"));
  d.set("n", PyValue::none());
  d.set("b", PyValue::list({PyValue::boolean(true), PyValue::boolean(false)}));
  d.set("e", PyValue::list({PyValue::tuple(), PyValue::dict(), PyValue::list()}));
  d.as_dict().emplace_back(PyValue::tuple({PyValue::integer(1), PyValue::str("x")}),
                           PyValue::str("tuplekey"));
  d.as_dict().emplace_back(PyValue::integer(5), PyValue::str("intkey"));
  return d;
}

constexpr std::string_view kPythonSampleProto2 =
    "\x80\x02}q\x00(X\x01\x00\x00\x00""aq\x01]q\x02(K\x01J\xff\xff\xff\xffM,\x01Jp\x11\x01\x00J\x90\xee\xfe\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f""eX\x01\x00\x00\x00""fq\x03G\x3f\xf8\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00tq\x04(K\x01K\x02K\x03K\x04tq\x05X\x01\x00\x00\x00uq\x06X\x0a\x00\x00\x00h\xc3\xa9llo \xe2\x9c\x93q\x07X\x01\x00\x00\x00nq\x08NX\x01\x00\x00\x00""bq\x09]q\x0a(\x88\x89""eX\x01\x00\x00\x00""eq\x0b]q\x0c()}q\x0d]q\x0e""eK\x01X\x01\x00\x00\x00xq\x0f\x86q\x10X\x08\x00\x00\x00tuplekeyq\x11K\x05X\x06\x00\x00\x00intkeyq\x12u."sv;
constexpr std::string_view kPythonSampleProto4 =
    "\x80\x04\x95\xa4\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01""a\x94]\x94(K\x01J\xff\xff\xff\xffM,\x01Jp\x11\x01\x00J\x90\xee\xfe\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f""e\x8c\x01""f\x94G\x3f\xf8\x00\x00\x00\x00\x00\x00\x8c\x01t\x94(K\x01K\x02K\x03K\x04t\x94\x8c\x01u\x94\x8c\x0ah\xc3\xa9llo \xe2\x9c\x93\x94\x8c\x01n\x94N\x8c\x01""b\x94]\x94(\x88\x89""e\x8c\x01""e\x94]\x94()}\x94]\x94""eK\x01\x8c\x01x\x94\x86\x94\x8c\x08tuplekey\x94K\x05\x8c\x06intkey\x94u."sv;
// pickle.dumps(os.system): STACK_GLOBAL of ('posix', 'system').
constexpr std::string_view kPickledOsSystem =
    "\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94."sv;
// The classic payload: GLOBAL os.system, then REDUCE with ('echo hi',).
constexpr std::string_view kGlobalReduce =
    "\x80\x02""cos\nsystem\n(X\x07\x00\x00\x00""echo hitR."sv;
// pickle.dumps(bytearray(b'ab'), protocol=5).
constexpr std::string_view kByteArray8 =
    "\x80\x05\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x96\x02\x00\x00\x00\x00\x00\x00\x00""ab\x94."sv;
// l = []; l.append(l); pickle.dumps(l, protocol=4).
constexpr std::string_view kRecursiveList =
    "\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00""a."sv;

// Every kind and every encoding boundary the writer chooses between.
PyValue every_kind() {
  PyValue::List ints;
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{65535},
                    int64_t{65536}, int64_t{-1}, int64_t{-128}, int64_t{-129},
                    int64_t{INT32_MAX}, int64_t{INT32_MAX} + 1, int64_t{INT32_MIN},
                    int64_t{INT32_MIN} - 1, int64_t{1} << 40, -(int64_t{1} << 40),
                    int64_t{0x7f} << 48, int64_t{0x80} << 48, INT64_MAX, INT64_MIN}) {
    ints.push_back(PyValue::integer(v));
  }
  PyValue::List floats;
  for (double d : {0.0, -0.0, 1.5, -2.25, 1e308, 5e-324, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}) {
    floats.push_back(PyValue::floating(d));
  }
  PyValue::List strs = {PyValue::str(""), PyValue::str("a"), PyValue::str(std::string(255, 'x')),
                        PyValue::str(std::string(256, 'y')), PyValue::str(std::string(70000, 'z')),
                        PyValue::str("\xf0\x9f\x98\x80 \xe4\xb8\xad \xc3\xa9")};
  PyValue::List tuples;
  PyValue::List members;
  for (int n = 0; n <= 5; ++n) {
    tuples.push_back(PyValue::tuple(members));
    members.push_back(PyValue::integer(n));
  }
  PyValue d = PyValue::dict();
  d.set("none", PyValue::none());
  d.set("true", PyValue::boolean(true));
  d.set("false", PyValue::boolean(false));
  d.set("ints", PyValue::list(ints));
  d.set("floats", PyValue::list(floats));
  d.set("strs", PyValue::list(strs));
  d.set("tuples", PyValue::list(tuples));
  d.set("empty_list", PyValue::list());
  d.set("empty_dict", PyValue::dict());
  d.set("nested", PyValue::list({PyValue::dict({{PyValue::str("k"), PyValue::list({})}})}));
  d.as_dict().emplace_back(PyValue::integer(7), PyValue::str("int key"));
  d.as_dict().emplace_back(PyValue::none(), PyValue::str("None key"));
  d.as_dict().emplace_back(PyValue::tuple({PyValue::integer(0), PyValue::integer(0)}),
                           PyValue::str("tuple key"));
  return d;
}

// The repository's copy of the reference traces (tests/data/traces).
constexpr const char* kDataTraces = CACHEALLOC_DATA_DIR "/traces";

// The reference traces to read, by file name: $CACHEALLOC_TRACES_DIR's
// alone when set; else the repository's copy, plus those of the reference
// folder (../shared/traces, when it exists) that the copy lacks.
std::map<std::string, std::filesystem::path> reference_traces() {
  std::vector<std::filesystem::path> dirs = {kDataTraces, CACHEALLOC_SHARED_DIR "/traces"};
  if (const char* env = std::getenv("CACHEALLOC_TRACES_DIR")) dirs = {env};
  std::map<std::string, std::filesystem::path> found;
  for (const auto& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".pickle.gz")) found.emplace(name, entry.path());
    }
  }
  return found;
}

// Expects read_pickle(bytes) to throw a PickleError whose message holds `part`.
void expect_rejected(std::string_view bytes, const std::string& part) {
  try {
    read_pickle(bytes);
    ADD_FAILURE() << "accepted, expected an error containing: " << part;
  } catch (const PickleError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << part;
  }
}

// Expects read_pickle_file(path) to throw a PickleError holding `part`.
void expect_file_rejected(const std::string& path, const std::string& part) {
  try {
    read_pickle_file(path);
    ADD_FAILURE() << "accepted " << path << ", expected an error containing: " << part;
  } catch (const PickleError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << part;
  }
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("cachealloc_pickle_test_" + name)).string();
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(PyValue, AccessorOfWrongKindThrowsNamingBoth) {
  PyValue v = PyValue::integer(3);
  EXPECT_EQ(v.as_int(), 3);
  EXPECT_DOUBLE_EQ(v.as_float(), 3.0);  // Ints widen to float.
  try {
    v.as_str();
    FAIL();
  } catch (const PyValueError& e) {
    EXPECT_STREQ(e.what(), "PyValue: expected str, got int");
  }
  EXPECT_THROW(PyValue::floating(1.0).as_int(), PyValueError);
  EXPECT_THROW(PyValue::tuple().append(PyValue()), PyValueError);
}

TEST(PyValue, CopiesShareContainers) {
  PyValue a = PyValue::list();
  PyValue b = a;
  b.append(PyValue::integer(1));
  EXPECT_EQ(a.items().size(), 1u);
}

TEST(PyValue, MissingKeyThrowsNamingKey) {
  PyValue d = PyValue::dict();
  d.set("present", PyValue::none());
  EXPECT_TRUE(d.at("present").is_none());
  EXPECT_EQ(d.find("absent"), nullptr);
  try {
    d.at("absent");
    FAIL();
  } catch (const PyValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'absent'"), std::string::npos);
  }
}

TEST(PyValue, EqualityKeepsKinds) {
  EXPECT_NE(PyValue::integer(1), PyValue::floating(1.0));
  EXPECT_NE(PyValue::integer(1), PyValue::boolean(true));
  EXPECT_NE(PyValue::list(), PyValue::tuple());
  EXPECT_EQ(every_kind(), every_kind());
}

TEST(PickleRoundTrip, EveryKindReadsBackEqual) {
  const PyValue v = every_kind();
  const PyValue back = read_pickle(write_pickle(v));
  EXPECT_EQ(back, v);
  // -0.0 == 0.0, so check the sign separately.
  EXPECT_TRUE(std::signbit(back.at("floats").items()[1].as_float()));
}

TEST(PickleRoundTrip, PythonSampleRewrittenReadsBackEqual) {
  const PyValue v = read_pickle(kPythonSampleProto4);
  EXPECT_EQ(read_pickle(write_pickle(v)), v);
}

TEST(PickleRoundTrip, LargeContainersBatchedReadBackEqual) {
  PyValue big_list = PyValue::list();
  PyValue big_dict = PyValue::dict();
  for (int i = 0; i < 2501; ++i) {
    big_list.append(PyValue::integer(i));
    big_dict.set("key" + std::to_string(i), PyValue::integer(i));
  }
  PyValue big_tuple = PyValue::tuple(big_list.items());
  const PyValue v = PyValue::list({big_list, big_dict, big_tuple});
  EXPECT_EQ(read_pickle(write_pickle(v)), v);
}

TEST(PickleWriter, StartsWithProto4AndEndsWithStop) {
  const std::string p = write_pickle(PyValue::none());
  EXPECT_EQ(p, "\x80\x04N."sv);
}

TEST(PickleWriter, RepeatedStringsWrittenOnce) {
  const std::string file = "site-packages/torch/nn/modules/module.py";
  PyValue frames = PyValue::list();
  for (int i = 0; i < 10000; ++i) frames.append(PyValue::str(file));
  const std::string p = write_pickle(frames);
  EXPECT_LT(p.size(), 10000u * 6);  // One copy, then BINGET (2 bytes) each.
  EXPECT_EQ(read_pickle(p), frames);
}

TEST(PickleWriter, LongStringReferencedManyTimesIsHashedOnce) {
  // One 4 MiB string referenced 20000 times (a name shared by many frames).
  // Looked up by its text per reference, writing hashed and compared 80 GiB
  // (4 s here); found again by address, it is hashed once (40 ms in all).
  const PyValue name = PyValue::str(std::string(4 << 20, 'n'));
  PyValue v = PyValue::list(std::vector<PyValue>(20000, name));
  v.append(PyValue::str(std::string(4 << 20, 'n')));  // equal text, another box
  const auto start = std::chrono::steady_clock::now();
  const std::string p = write_pickle(v);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.5);
  EXPECT_LT(p.size(), (4u << 20) + 20001u * 6);  // The text once, then references.
  const PyValue back = read_pickle(p);
  ASSERT_EQ(back.items().size(), 20001u);
  EXPECT_EQ(back.items()[0], name);
  for (const PyValue& item : back.items()) EXPECT_EQ(&item.as_str(), &back.items()[0].as_str());
}

TEST(PickleWriter, MemoPast255UsesLongBinGet) {
  PyValue v = PyValue::list();
  for (int rep = 0; rep < 2; ++rep) {
    for (int i = 0; i < 600; ++i) v.append(PyValue::str("s" + std::to_string(i)));
  }
  EXPECT_EQ(read_pickle(write_pickle(v)), v);
}

TEST(PickleWriter, SharedContainerWrittenOnceAndStaysShared) {
  PyValue inner = PyValue::list({PyValue::str("x"), PyValue::integer(1)});
  PyValue outer = PyValue::list({inner, inner, PyValue::tuple({inner})});
  const PyValue back = read_pickle(write_pickle(outer));
  EXPECT_EQ(back, outer);
  EXPECT_EQ(&back.items()[0].items(), &back.items()[1].items());
}

TEST(PickleWriter, RejectsCycle) {
  PyValue l = PyValue::list();
  l.append(l);
  EXPECT_THROW(write_pickle(l), PickleError);
  l.items().clear();  // Break the cycle so the list is freed.
}

TEST(PickleReader, ReadsPythonPicklesOfProtocols2To5) {
  EXPECT_EQ(read_pickle(kPythonSampleProto2), python_sample());
  EXPECT_EQ(read_pickle(kPythonSampleProto4), python_sample());
  std::string proto3(kPythonSampleProto2), proto5(kPythonSampleProto4);
  proto3[1] = 3;  // Same opcodes as protocol 2 here.
  proto5[1] = 5;
  EXPECT_EQ(read_pickle(proto3), python_sample());
  EXPECT_EQ(read_pickle(proto5), python_sample());
}

TEST(PickleReader, ReadsEverySnapshotTrace) {
  int n_read = 0;
  for (const auto& [name, file] : reference_traces()) {
    const std::string path = file.string();
    SCOPED_TRACE(path);
    const PyValue snap = read_pickle_file(path);
    ASSERT_EQ(snap.kind(), Kind::kDict);
    EXPECT_EQ(snap.at("segments").kind(), Kind::kList);
    const PyValue& trace = snap.at("device_traces").items().at(0);
    // The .json beside it records how many events the run traced.
    std::ifstream json(path.substr(0, path.size() - std::string(".pickle.gz").size()) + ".json");
    ASSERT_TRUE(json) << "no .json beside the pickle";
    std::stringstream text;
    text << json.rdbuf();
    std::smatch m;
    const std::string s = text.str();
    ASSERT_TRUE(std::regex_search(s, m, std::regex("\"n_events\"\\s*:\\s*(\\d+)")));
    EXPECT_EQ(trace.items().size(), std::stoul(m[1].str()));
    if (!trace.items().empty()) {
      EXPECT_EQ(trace.items()[0].at("action").kind(), Kind::kStr);
    }
    // Our writer's copy of a real snapshot reads back equal.
    EXPECT_EQ(read_pickle(write_pickle(snap)), snap);
    ++n_read;
  }
  EXPECT_GE(n_read, 12);  // The repository holds 12.
}

TEST(PickleReader, DetectsGzipByMagicNotByName) {
  const std::string plain = temp_path("plain.pickle.gz");  // Not gzip despite the name.
  write_file(plain, write_pickle(every_kind()));
  EXPECT_EQ(read_pickle_file(plain), every_kind());
  std::remove(plain.c_str());
}

TEST(PickleReader, MissingFileThrowsNamingPath) {
  try {
    read_pickle_file("/nonexistent/dir/x.pickle");
    FAIL();
  } catch (const PickleError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.pickle"), std::string::npos);
  }
}

TEST(PickleReader, CorruptOrTruncatedGzipThrows) {
  const std::string path = temp_path("bad.pickle.gz");
  write_file(path, "\x1f\x8b\x08\x00garbage that is not deflate"sv);
  EXPECT_THROW(read_pickle_file(path), PickleError);
  std::ifstream in(std::string(kDataTraces) + "/mlp.pickle.gz", std::ios::binary);
  ASSERT_TRUE(in) << kDataTraces << "/mlp.pickle.gz";
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file(path, std::string_view(gz).substr(0, gz.size() / 2));
  EXPECT_THROW(read_pickle_file(path), PickleError);
  std::remove(path.c_str());
}

TEST(PickleReader, RejectsGlobalOpcode) {
  try {
    read_pickle(kGlobalReduce);
    FAIL();
  } catch (const PickleError& e) {
    EXPECT_STREQ(e.what(),
                 "pickle: opcode GLOBAL (0x63) at offset 2 is not allowed: "
                 "only plain data is accepted");
  }
}

TEST(PickleReader, RejectsStackGlobalOfPickledOsSystem) {
  expect_rejected(kPickledOsSystem, "STACK_GLOBAL (0x93) at offset 28 is not allowed");
}

TEST(PickleReader, RejectsEveryOpcodeThatNamesOrRunsCode) {
  const std::pair<char, const char*> code_ops[] = {
      {'c', "GLOBAL"}, {'\x93', "STACK_GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"},
      {'i', "INST"}, {'o', "OBJ"}, {'\x81', "NEWOBJ"}, {'\x92', "NEWOBJ_EX"},
      {'P', "PERSID"}, {'Q', "BINPERSID"}, {'\x82', "EXT1"}, {'\x83', "EXT2"},
      {'\x84', "EXT4"}, {'\x97', "NEXT_BUFFER"}, {'\x98', "READONLY_BUFFER"}};
  for (const auto& [op, name] : code_ops) {
    // Put the opcode after a valid value so it is reached mid-stream.
    const std::string bytes = std::string("\x80\x04N", 3) + op + "..";
    expect_rejected(bytes, std::string(name) + " (0x");
    expect_rejected(bytes, "at offset 3 is not allowed");
  }
}

TEST(PickleReader, RejectsProtocol5ByteArray8) {
  expect_rejected(kByteArray8, "BYTEARRAY8 (0x96) at offset 11 is not supported");
}

TEST(PickleReader, RejectsEveryTruncation) {
  const std::string written = write_pickle(python_sample());
  for (const std::string_view valid : {std::string_view(written), kPythonSampleProto4,
                                       kPythonSampleProto2}) {
    for (size_t n = 0; n < valid.size(); ++n) {
      EXPECT_THROW(read_pickle(valid.substr(0, n)), PickleError) << n;
    }
  }
}

TEST(PickleReader, RandomByteFlipsThrowOrParseNeverCrash) {
  const std::string valid(kPythonSampleProto4);
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = valid;
    for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      read_pickle(bytes);
    } catch (const PickleError&) {
    }
  }
}

TEST(PickleReader, RejectsNesting100000Deep) {
  const size_t n = 100000;
  std::string lists = "\x80\x04" + std::string(n, ']') + std::string(n - 1, 'a') + ".";
  expect_rejected(lists, "nesting deeper than 1000");
  std::string tuples = "\x80\x04N" + std::string(n, '\x85') + ".";
  expect_rejected(tuples, "nesting deeper than 1000");
  std::string marks = "\x80\x04" + std::string(n, '(') + "N" + std::string(n, 't') + ".";
  expect_rejected(marks, "nesting deeper than 1000");
}

TEST(PickleReader, AcceptsNestingAtTheLimit) {
  PyValue v = PyValue::list();
  for (size_t depth = 1; depth < kMaxPickleNesting; ++depth) v = PyValue::list({v});
  EXPECT_EQ(read_pickle(write_pickle(v)), v);
  expect_rejected(write_pickle(PyValue::list({v})), "nesting deeper than 1000");
}

TEST(PickleReader, RejectsChangingAListAfterNestingIt) {
  // a = []; b = [a]; drop b; then a.append(None): the trick that would grow
  // depth (or build cycles) behind the depth check.
  expect_rejected("\x80\x04]\x94]h\x00""a0Na."sv, "already inside another container");
  expect_rejected(kRecursiveList, "recursive pickles are not supported");
  expect_rejected("\x80\x04}\x94h\x00Nh\x00s."sv, "already inside another container");
}

TEST(PickleReader, RejectsLengthFieldsBeyondInput) {
  expect_rejected("\x80\x04X\xff\xff\xff\xff""abc."sv, "needs 4294967295 argument bytes, 4 left");
  expect_rejected("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."sv, "truncated input");
  expect_rejected("\x80\x04\x8b\xff\xff\xff\x7f."sv, "truncated input");
  expect_rejected("\x80\x04\x8b\xff\xff\xff\xff."sv, "negative byte count");
  expect_rejected("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xffN."sv, "exceeds the 2 bytes left");
}

TEST(PickleReader, RejectsFrameInsideFrame) {
  expect_rejected("\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x95\x01\x00\x00\x00\x00\x00\x00\x00N."sv,
                  "new FRAME before the end of the previous one");
}

TEST(PickleReader, RejectsIntsBeyond64Bits) {
  // pickle.dumps(2**63): LONG1 of 9 bytes.
  expect_rejected("\x80\x04\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00."sv,
                  "integer of 9 bytes does not fit in signed 64 bits");
  // A 9-byte encoding of -1 is only sign extension: it fits.
  EXPECT_EQ(read_pickle("\x80\x04\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff."sv),
            PyValue::integer(-1));
  EXPECT_EQ(read_pickle("\x80\x04\x8a\x00."sv), PyValue::integer(0));
  EXPECT_EQ(read_pickle("\x80\x04\x8b\x02\x00\x00\x00\x00\x80."sv), PyValue::integer(-32768));
}

TEST(PickleReader, RejectsMalformedStructure) {
  expect_rejected("\x80\x04\xff."sv, "unknown opcode 0xff at offset 2");
  expect_rejected("\x80\x04""a."sv, "APPEND at offset 2: stack underflow");
  expect_rejected("\x80\x04](a."sv, "stack underflow");  // Items below a MARK are fenced off.
  expect_rejected("\x80\x04""e."sv, "no MARK to match");
  expect_rejected("\x80\x04(N."sv, "MARK(s) left open");
  expect_rejected("\x80\x04NN."sv, "expected one value on the stack, found 2");
  expect_rejected("\x80\x04h\x05."sv, "memo index 5 out of range");
  expect_rejected("\x80\x04j\x00\x00\x01\x00."sv, "memo index 65536 out of range");
  expect_rejected("\x80\x04}(Nu."sv, "odd number of dict items");
  expect_rejected("\x80\x04N\x80\x04."sv, "PROTO is only allowed at offset 0");
  expect_rejected("\x80\x04NNa."sv, "target is a NoneType");
}

TEST(PickleReader, RejectsBadProtocol) {
  expect_rejected(""sv, "bad protocol");
  expect_rejected("N."sv, "no PROTO header");
  expect_rejected("\x80\x01N."sv, "bad protocol 1");
  expect_rejected("\x80\x06N."sv, "bad protocol 6");
}

TEST(PickleReader, RejectsMissingStopAndTrailingBytes) {
  expect_rejected("\x80\x04N"sv, "no STOP before the end of data at offset 3");
  expect_rejected("\x80\x04N.N"sv, "1 trailing bytes after STOP");
}

TEST(PickleReader, RejectsInvalidUtf8) {
  expect_rejected("\x80\x04\x8c\x02\xc3\x28."sv, "invalid UTF-8 at byte 0");
  expect_rejected("\x80\x04\x8c\x03\xed\xa0\x80."sv, "invalid UTF-8");  // Surrogate.
  expect_rejected("\x80\x04\x8c\x02\xc0\xaf."sv, "invalid UTF-8");      // Overlong.
  expect_rejected("\x80\x04\x8c\x02""a\xf0."sv, "invalid UTF-8 at byte 1");  // Cut short.
}

TEST(PickleReader, RejectsUnhashableDictKeys) {
  expect_rejected("\x80\x04}]Ns."sv, "unhashable dict key of type list");
  expect_rejected("\x80\x04}}Ns."sv, "unhashable dict key of type dict");
  expect_rejected("\x80\x04}]\x85Ns."sv, "unhashable dict key of type tuple");
  EXPECT_NO_THROW(read_pickle("\x80\x04}N\x85Ns."sv));  // (None,) is hashable.
}

TEST(PickleReader, AcceptsPopDupPopMarkAndBinPut) {
  // list, MARK, None, DUP, True, POP, APPENDS -> [None, None]; BINPUT 7, POP,
  // BINGET 7, then MARK None POP_MARK leaves just the list.
  const std::string_view bytes = "\x80\x02](N2\x88""0eq\x07""0h\x07(N1."sv;
  EXPECT_EQ(read_pickle(bytes), PyValue::list({PyValue::none(), PyValue::none()}));
}

// A list of 100,000 Nones, one input byte each: about 4.8 MB of values by
// the reader's estimate (48 bytes per value).
std::string many_nones() {
  std::string p = "\x80\x04]\x94(";
  p.append(100000, 'N');
  p += "e.";
  return p;
}

TEST(PickleReader, RefusesInputWhoseValuesExceedTheMemoryBudget) {
  ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", "1000000", 1), 0);
  try {
    read_pickle(many_nones());
    ADD_FAILURE() << "read a pickle over its memory budget";
  } catch (const PickleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loading needs more than 1000000 bytes of memory"), std::string::npos)
        << what;
    EXPECT_NE(what.find("CACHEALLOC_PICKLE_MEMORY_LIMIT=1000000"), std::string::npos) << what;
  }
  ASSERT_EQ(unsetenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"), 0);
  // Without the variable: 3/4 of the machine's memory, ample here.
  EXPECT_EQ(read_pickle(many_nones()).items().size(), 100000u);
  EXPECT_GT(pickle_memory_budget().bytes, uint64_t{0});
  EXPECT_NE(pickle_memory_budget().source.find("3/4"), std::string::npos);
}

TEST(PickleReader, RefusesAnInvalidMemoryBudgetVariableNamingIt) {
  for (const char* bad : {"abc", "0", "-5", "12abc", "99999999999999999999999", "1.5e-3"}) {
    ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", bad, 1), 0);
    try {
      read_pickle(many_nones());
      ADD_FAILURE() << "read a pickle under CACHEALLOC_PICKLE_MEMORY_LIMIT=" << bad;
    } catch (const PickleError& e) {
      EXPECT_NE(std::string(e.what()).find("CACHEALLOC_PICKLE_MEMORY_LIMIT='" + std::string(bad) + "'"),
                std::string::npos) << e.what();
    }
  }
  // Empty counts as unset.
  ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", "", 1), 0);
  EXPECT_NE(pickle_memory_budget().source.find("3/4"), std::string::npos);
  ASSERT_EQ(unsetenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"), 0);
}

TEST(PickleReader, MemoryBudgetVariableTakesTheToolsByteSizes) {
  for (const auto& [text, bytes] : {std::pair<const char*, uint64_t>{"200000000", 200000000},
                                    {"2e8", 200000000}, {"200MB", 200u << 20},
                                    {"1.5GiB", 3u << 29}}) {
    ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", text, 1), 0);
    EXPECT_EQ(pickle_memory_budget().bytes, bytes) << text;
  }
  ASSERT_EQ(unsetenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"), 0);
}

// A gzip member of `n` bytes of `fill` after `head`, written to `path` as
// it is compressed (never held whole).
void write_gzip(const std::string& path, std::string_view head, uint64_t n, char fill,
                std::string_view tail = {}) {
  gzFile gz = gzopen(path.c_str(), "wb1");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, head.data(), static_cast<unsigned>(head.size()));
  const std::string block(1 << 20, fill);
  for (uint64_t done = 0; done < n; done += block.size())
    gzwrite(gz, block.data(), static_cast<unsigned>(std::min<uint64_t>(block.size(), n - done)));
  if (!tail.empty()) gzwrite(gz, tail.data(), static_cast<unsigned>(tail.size()));
  gzclose(gz);
}

TEST(PickleReader, DecompressedInputCountsAgainstTheBudget) {
  // 64 MiB of zero-length FRAMEs builds no value at all: only the input
  // counts, and it is refused once 8 MB of it were read.
  const std::string path = temp_path("frames.pickle.gz");
  std::string frames;
  for (int i = 0; i < (1 << 16); ++i) frames += "\x95"s + std::string(8, '\0');
  {
    gzFile gz = gzopen(path.c_str(), "wb1");
    ASSERT_NE(gz, nullptr);
    gzwrite(gz, "\x80\x04", 2);
    for (int i = 0; i < 114; ++i) gzwrite(gz, frames.data(), static_cast<unsigned>(frames.size()));
    gzwrite(gz, "N.", 2);
    gzclose(gz);
  }
  ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", "8000000", 1), 0);
  expect_file_rejected(path, "loading needs more than 8000000 bytes of memory");
  ASSERT_EQ(unsetenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"), 0);
  EXPECT_EQ(read_pickle_file(path), PyValue::none());
  std::remove(path.c_str());
}

TEST(PickleReader, RefusesAStringLengthOverTheBudgetBeforeReadingIt) {
  // BINUNICODE8 announcing 2 GB, in a stream whose size is unknown.
  const std::string path = temp_path("bigstr.pickle.gz");
  write_gzip(path, "\x80\x04\x8d\x00\x94\x35\x77\x00\x00\x00\x00"sv, 1 << 20, 'a');
  ASSERT_EQ(setenv("CACHEALLOC_PICKLE_MEMORY_LIMIT", "2e8", 1), 0);
  // The budget the variable sets is the cap for one value too.
  expect_file_rejected(path, "over the cap of 200000000 bytes for one value");
  expect_file_rejected(path, "CACHEALLOC_PICKLE_MEMORY_LIMIT=2e8");
  ASSERT_EQ(unsetenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"), 0);
  // Under the default, one value may not exceed 16 x the file's size (at
  // least 64 MiB): refused before a byte of it is read.
  expect_file_rejected(path, "over the cap of 67108864 bytes for one value");
  expect_file_rejected(path, "set CACHEALLOC_PICKLE_MEMORY_LIMIT to raise it");
  std::remove(path.c_str());
}

TEST(PickleReader, StreamedInputKeepsEveryCheck) {
  const std::string path = temp_path("stream.pickle.gz");
  write_gzip(path, "\x80\x04N.N"sv, 0, 'x');
  expect_file_rejected(path, "1 trailing bytes after STOP");
  write_gzip(path, "\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00N."sv, 0, 'x');
  expect_file_rejected(path, "the last FRAME announced 7 more bytes than the input holds");
  write_gzip(path, "\x80\x04N"sv, 0, 'x');
  expect_file_rejected(path, "no STOP before the end of data at offset 3");
  write_gzip(path, "\x80\x04\x8c\x05" "ab"sv, 0, 'x');
  expect_file_rejected(path, "needs 5 argument bytes, 2 left");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cachealloc
