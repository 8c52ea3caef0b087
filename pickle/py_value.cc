#include "pickle/py_value.h"

#include <string>
#include <utility>
#include <vector>

namespace cachealloc {

namespace {

// Indexed by PyValue::Kind; spelled as Python's type(x).__name__.
constexpr const char* kKindNames[] = {"NoneType", "bool",  "int",   "float",
                                      "str",      "list",  "tuple", "dict"};

}  // namespace

const char* PyValue::kind_name() const {
  return kKindNames[static_cast<size_t>(kind())];
}

void PyValue::wrong_kind(const char* wanted) const {
  throw PyValueError(std::string("PyValue: expected ") + wanted + ", got " +
                     kind_name());
}

bool PyValue::as_bool() const {
  if (const bool* b = std::get_if<bool>(&data_)) return *b;
  wrong_kind("bool");
}

int64_t PyValue::as_int() const {
  if (const int64_t* i = std::get_if<int64_t>(&data_)) return *i;
  wrong_kind("int");
}

double PyValue::as_float() const {
  if (const double* d = std::get_if<double>(&data_)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&data_)) {
    return static_cast<double>(*i);
  }
  wrong_kind("float");
}

const std::string& PyValue::as_str() const {
  if (const StrBox* s = std::get_if<StrBox>(&data_)) return *s->p;
  wrong_kind("str");
}

std::shared_ptr<const std::string> PyValue::str_box() const {
  if (const StrBox* s = std::get_if<StrBox>(&data_)) return s->p;
  wrong_kind("str");
}

const PyValue::List& PyValue::items() const {
  if (const ListBox* l = std::get_if<ListBox>(&data_)) return *l->p;
  if (const TupleBox* t = std::get_if<TupleBox>(&data_)) return *t->p;
  wrong_kind("list or tuple");
}

PyValue::List& PyValue::items() {
  if (ListBox* l = std::get_if<ListBox>(&data_)) return *l->p;
  if (TupleBox* t = std::get_if<TupleBox>(&data_)) return *t->p;
  wrong_kind("list or tuple");
}

const PyValue::Dict& PyValue::as_dict() const {
  if (const DictBox* d = std::get_if<DictBox>(&data_)) return *d->p;
  wrong_kind("dict");
}

PyValue::Dict& PyValue::as_dict() {
  if (DictBox* d = std::get_if<DictBox>(&data_)) return *d->p;
  wrong_kind("dict");
}

const PyValue* PyValue::find(std::string_view key) const {
  for (const auto& [k, v] : as_dict()) {
    if (k.kind() == Kind::kStr && k.as_str() == key) return &v;
  }
  return nullptr;
}

const PyValue& PyValue::at(std::string_view key) const {
  if (const PyValue* v = find(key)) return *v;
  throw PyValueError("PyValue: missing dict key '" + std::string(key) + "'");
}

void PyValue::set(std::string key, PyValue value) {
  as_dict().emplace_back(PyValue::str(std::move(key)), std::move(value));
}

void PyValue::append(PyValue value) {
  ListBox* l = std::get_if<ListBox>(&data_);
  if (l == nullptr) wrong_kind("list");
  l->p->push_back(std::move(value));
}

bool PyValue::operator==(const PyValue& other) const {
  // Explicit work list of pairs still to compare, so that a deeply nested
  // tree cannot overflow the call stack.
  std::vector<std::pair<const PyValue*, const PyValue*>> pending;
  pending.emplace_back(this, &other);
  while (!pending.empty()) {
    auto [a, b] = pending.back();
    pending.pop_back();
    if (a->kind() != b->kind()) return false;
    switch (a->kind()) {
      case Kind::kNone:
        break;
      case Kind::kBool:
        if (a->as_bool() != b->as_bool()) return false;
        break;
      case Kind::kInt:
        if (a->as_int() != b->as_int()) return false;
        break;
      case Kind::kFloat:
        if (a->as_float() != b->as_float()) return false;
        break;
      case Kind::kStr:
        if (a->as_str() != b->as_str()) return false;
        break;
      case Kind::kList:
      case Kind::kTuple: {
        const List& la = a->items();
        const List& lb = b->items();
        if (&la == &lb) break;  // Shared box: same object, equal by identity.
        if (la.size() != lb.size()) return false;
        for (size_t i = 0; i < la.size(); ++i) pending.emplace_back(&la[i], &lb[i]);
        break;
      }
      case Kind::kDict: {
        // Order-sensitive: both sides come from insertion-ordered dicts, and
        // the pickle round trip keeps that order.
        const Dict& da = a->as_dict();
        const Dict& db = b->as_dict();
        if (&da == &db) break;
        if (da.size() != db.size()) return false;
        for (size_t i = 0; i < da.size(); ++i) {
          pending.emplace_back(&da[i].first, &db[i].first);
          pending.emplace_back(&da[i].second, &db[i].second);
        }
        break;
      }
    }
  }
  return true;
}

}  // namespace cachealloc
