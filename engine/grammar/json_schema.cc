#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace waste::grammar {
namespace {

using json = nlohmann::json;
using Kind = SchemaNode::Kind;

constexpr size_t kMaxNodes = 4096;
constexpr int kMaxDepth = 64;
constexpr size_t kMaxMembers = 64;  // properties of one object, values of one enum
constexpr double kMaxBound = 1e15;  // |minimum|, |maximum|: exact in a double, digits bounded

// Keywords with no effect on the instances.
const std::set<std::string> kAnnotations = {"title",    "description", "default",
                                            "examples", "$schema",     "$id",
                                            "$comment", "$defs",       "definitions"};
const std::set<std::string> kTypeKeywords = {
    "type",     "properties",       "required",         "additionalProperties",
    "items",    "minItems",         "maxItems",         "minimum",
    "maximum",  "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength"};

std::string Escape(std::string_view token) {  // a JSON pointer token
  std::string out;
  for (char c : token) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// The JSON type names a value has ("integer" values are "number" too).
bool HasType(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

class Compiler {
 public:
  Compiler(const json& root, const SchemaOptions& o) : root_(root), o_(o) {}

  Result<std::shared_ptr<const JsonGrammar>> Run() {
    auto g = std::make_shared<JsonGrammar>();
    g_ = g.get();
    const int root = New(Kind::kAnyOf, "#");
    if (Status s = Fill(root, root_, "#", 0); !s.ok()) return s;
    g->root = root;
    if (Status s = Measure(); !s.ok()) return s;
    return std::shared_ptr<const JsonGrammar>(std::move(g));
  }

  // Any JSON value (`object_only`: any object), into a fresh grammar.
  std::shared_ptr<const JsonGrammar> Any(bool object_only) {
    auto g = std::make_shared<JsonGrammar>();
    g_ = g.get();
    const int any = AnyValue();
    g->root = object_only ? g_->nodes[static_cast<size_t>(any)].alternatives[0] : any;
    (void)Measure();  // any value has a finite instance
    return g;
  }

 private:
  int New(Kind k, const std::string& where) {
    g_->nodes.emplace_back();
    g_->nodes.back().kind = k;
    paths_.push_back(where);
    return static_cast<int>(g_->nodes.size() - 1);
  }
  SchemaNode& N(int i) { return g_->nodes[static_cast<size_t>(i)]; }

  // anyOf[object of any values, array of any values, string, number, true/false/null].
  int AnyValue() {
    if (any_ >= 0) return any_;
    any_ = New(Kind::kAnyOf, "(any value)");
    const int obj = New(Kind::kObject, "(any value)");
    const int arr = New(Kind::kArray, "(any value)");
    const int str = New(Kind::kString, "(any value)");
    const int num = New(Kind::kNumber, "(any value)");
    const int lit = New(Kind::kLiterals, "(any value)");
    N(obj).additional = any_;
    N(arr).items = any_;
    N(lit).literals = {"true", "false", "null"};
    N(any_).alternatives = {obj, arr, str, num, lit};
    return any_;
  }

  static Status Error(const std::string& where, const std::string& what) {
    return Status::Error(what + " at " + where);
  }

  Status Fill(int node, const json& s, const std::string& where, int depth) {
    if (depth > kMaxDepth) return Error(where, "the schema nests deeper than 64");
    if (g_->nodes.size() > kMaxNodes) return Error(where, "the schema has over 4096 parts");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Error(where, "the schema false (no instance)");
      return Copy(node, AnyValue());
    }
    if (!s.is_object()) return Error(where, "a schema that is not an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (kAnnotations.count(key) || kTypeKeywords.count(key) || key == "enum" || key == "const" ||
          key == "anyOf" || key == "$ref")
        continue;
      return Error(where, "unsupported keyword '" + key.substr(0, 60) + "'");
    }
    // Whatever combines with $ref or anyOf would be an intersection: refused.
    for (const char* alone : {"$ref", "anyOf"}) {
      if (!s.contains(alone)) continue;
      for (const auto& [key, v] : s.items())
        if (key != alone && !kAnnotations.count(key))
          return Error(where, "'" + key.substr(0, 60) + "' beside '" + alone + "'");
    }
    if (s.contains("$ref")) return Ref(node, s["$ref"], where + "/$ref", depth);
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty())
        return Error(where + "/anyOf", "anyOf that is not a non-empty array");
      std::vector<int> alts;
      for (size_t i = 0; i < a.size(); ++i) {
        const std::string w = where + "/anyOf/" + std::to_string(i);
        const int alt = New(Kind::kAnyOf, w);
        WASTE_RETURN_IF_ERROR(Fill(alt, a[i], w, depth + 1));
        alts.push_back(alt);
      }
      N(node).kind = Kind::kAnyOf;
      N(node).alternatives = std::move(alts);
      return Status::Ok();
    }
    // The types allowed: "type", else all of them (each constrained by its keywords).
    std::vector<std::string> types;
    if (const auto t = s.find("type"); t != s.end()) {
      const std::vector<json> list =
          t->is_array() ? t->get<std::vector<json>>() : std::vector<json>{*t};
      if (list.empty()) return Error(where + "/type", "an empty type list");
      for (const json& e : list) {
        static const std::set<std::string> kTypes = {"object",  "array",   "string", "number",
                                                     "integer", "boolean", "null"};
        if (!e.is_string() || !kTypes.count(e.get<std::string>()))
          return Error(where + "/type",
                       "a type that is not one of object, array, string, number, "
                       "integer, boolean, null");
        types.push_back(e.get<std::string>());
      }
    } else {
      types = {"object", "array", "string", "number", "boolean", "null"};
    }
    if (s.contains("enum") || s.contains("const")) return Literals(node, s, types, where);
    std::vector<int> alts;
    bool literal_done = false;
    for (const std::string& type : types) {
      if (type == "boolean" || type == "null") {
        if (literal_done) continue;  // one node holds both
        literal_done = true;
        const int lit = New(Kind::kLiterals, where);
        for (const std::string& t : types) {
          if (t == "boolean") N(lit).literals.insert(N(lit).literals.end(), {"true", "false"});
          if (t == "null") N(lit).literals.push_back("null");
        }
        alts.push_back(lit);
        continue;
      }
      const int alt = New(Kind::kAnyOf, where);
      if (type == "object") WASTE_RETURN_IF_ERROR(Object(alt, s, where, depth));
      if (type == "array") WASTE_RETURN_IF_ERROR(Array(alt, s, where, depth));
      if (type == "string") WASTE_RETURN_IF_ERROR(String(alt, s, where));
      if (type == "number" || type == "integer")
        WASTE_RETURN_IF_ERROR(Number(alt, s, where, type == "integer"));
      alts.push_back(alt);
    }
    if (alts.size() == 1) return Copy(node, alts[0]);
    N(node).kind = Kind::kAnyOf;
    N(node).alternatives = std::move(alts);
    return Status::Ok();
  }

  Status Copy(int to, int from) {
    SchemaNode n = N(from);
    N(to) = std::move(n);
    return Status::Ok();
  }

  Status Ref(int node, const json& ref, const std::string& where, int depth) {
    if (!ref.is_string()) return Error(where, "a $ref that is not a string");
    const std::string r = ref.get<std::string>();
    std::string name;
    const json* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) == 0) {
        name = r.substr(p.size());
        const auto d = root_.find(p.substr(2, p.size() - 3));
        if (d != root_.end() && d->is_object()) defs = &*d;
      }
    }
    if (name.empty() || name.find('/') != std::string::npos || name.find('~') != std::string::npos)
      return Error(where, "a $ref other than \"#/$defs/NAME\" or \"#/definitions/NAME\" ('" +
                              r.substr(0, 60) + "')");
    if (!defs || !defs->contains(name))
      return Error(where, "a $ref to a missing definition ('" + r.substr(0, 60) + "')");
    // A reference is the defined node itself (recursion is a cycle of nodes).
    auto it = refs_.find(r);
    if (it == refs_.end()) {
      const int target = New(Kind::kAnyOf, r);
      it = refs_.emplace(r, target).first;
      WASTE_RETURN_IF_ERROR(Fill(target, (*defs)[name], r, depth + 1));
    }
    N(node).kind = Kind::kAnyOf;
    N(node).alternatives = {it->second};
    return Status::Ok();
  }

  Status Count(const json& s, const char* key, const std::string& where, uint64_t* out) {
    const auto v = s.find(key);
    if (v == s.end()) return Status::Ok();
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      return Error(where + "/" + key,
                   std::string("'") + key + "' that is not a non-negative integer");
    *out = v->get<uint64_t>();
    return Status::Ok();
  }

  Status Object(int node, const json& s, const std::string& where, int depth) {
    N(node).kind = Kind::kObject;
    std::vector<SchemaNode::Property> props;
    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return Error(where + "/properties", "properties that is not an object");
      if (p->size() > kMaxMembers) return Error(where + "/properties", "over 64 properties");
      for (const auto& [key, sub] : p->items()) {
        const std::string w = where + "/properties/" + Escape(key);
        const int child = New(Kind::kAnyOf, w);
        WASTE_RETURN_IF_ERROR(Fill(child, sub, w, depth + 1));
        const std::string text = json(key).dump();
        props.push_back({text.substr(1, text.size() - 2), child, false});
      }
    }
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return Error(where + "/required", "required that is not an array");
      for (const json& name : *r) {
        if (!name.is_string())
          return Error(where + "/required", "a required name that is not a string");
        const std::string text = json(name).dump();
        bool found = false;
        for (auto& p : props)
          if (p.key == text.substr(1, text.size() - 2)) p.required = found = true;
        if (!found)
          return Error(where + "/required", "required property '" +
                                                name.get<std::string>().substr(0, 60) +
                                                "' not in properties");
      }
    }
    int additional = -1;
    const auto a = s.find("additionalProperties");
    if (a == s.end() || (a->is_boolean() && a->get<bool>())) {
      if (o_.strict)
        return Error(where, "strict mode needs 'additionalProperties': false on every object");
      additional = AnyValue();
    } else if (a->is_object()) {
      if (o_.strict)
        return Error(where, "strict mode needs 'additionalProperties': false on every object");
      additional = New(Kind::kAnyOf, where + "/additionalProperties");
      WASTE_RETURN_IF_ERROR(Fill(additional, *a, where + "/additionalProperties", depth + 1));
    } else if (!a->is_boolean()) {
      return Error(where + "/additionalProperties",
                   "additionalProperties that is not a boolean or a schema");
    }
    if (o_.strict)
      for (const auto& p : props)
        if (!p.required)
          return Error(where + "/required", "strict mode needs every property required ('" +
                                                p.key.substr(0, 60) + "' is not)");
    N(node).properties = std::move(props);
    N(node).additional = additional;
    return Status::Ok();
  }

  Status Array(int node, const json& s, const std::string& where, int depth) {
    N(node).kind = Kind::kArray;
    uint64_t lo = 0, hi = UINT64_MAX;
    WASTE_RETURN_IF_ERROR(Count(s, "minItems", where, &lo));
    WASTE_RETURN_IF_ERROR(Count(s, "maxItems", where, &hi));
    if (lo > hi) return Error(where, "minItems above maxItems");
    int items;
    if (const auto it = s.find("items"); it != s.end()) {
      if (it->is_array())
        return Error(where + "/items",
                     "items as an array (tuples; use prefixItems, also unsupported)");
      items = New(Kind::kAnyOf, where + "/items");
      WASTE_RETURN_IF_ERROR(Fill(items, *it, where + "/items", depth + 1));
    } else {
      items = AnyValue();
    }
    N(node).items = items;
    N(node).min_items = lo;
    N(node).max_items = hi;
    return Status::Ok();
  }

  Status String(int node, const json& s, const std::string& where) {
    N(node).kind = Kind::kString;
    WASTE_RETURN_IF_ERROR(Count(s, "minLength", where, &N(node).min_length));
    WASTE_RETURN_IF_ERROR(Count(s, "maxLength", where, &N(node).max_length));
    if (N(node).min_length > N(node).max_length) return Error(where, "minLength above maxLength");
    return Status::Ok();
  }

  Status Bound(const json& s, const char* key, const std::string& where, double* out, bool* set) {
    const auto v = s.find(key);
    if (v == s.end()) return Status::Ok();
    if (v->is_boolean()) return Status::Ok();  // draft 4's exclusive flags: read by Number
    if (!v->is_number())
      return Error(where + "/" + key, std::string("'") + key + "' that is not a number");
    const double d = v->get<double>();
    if (!(std::fabs(d) <= kMaxBound))
      return Error(where + "/" + key, std::string("'") + key + "' beyond +-1e15");
    *out = d;
    *set = true;
    return Status::Ok();
  }

  Status Number(int node, const json& s, const std::string& where, bool integer) {
    SchemaNode& n = N(node);
    n.kind = Kind::kNumber;
    n.integer = integer;
    double lo = 0, hi = 0, xlo = 0, xhi = 0;
    bool has_lo = false, has_hi = false, has_xlo = false, has_xhi = false;
    WASTE_RETURN_IF_ERROR(Bound(s, "minimum", where, &lo, &has_lo));
    WASTE_RETURN_IF_ERROR(Bound(s, "maximum", where, &hi, &has_hi));
    WASTE_RETURN_IF_ERROR(Bound(s, "exclusiveMinimum", where, &xlo, &has_xlo));
    WASTE_RETURN_IF_ERROR(Bound(s, "exclusiveMaximum", where, &xhi, &has_xhi));
    // Draft 4: exclusiveMinimum: true makes minimum exclusive.
    const auto flag = [&](const char* k) {
      const auto v = s.find(k);
      return v != s.end() && v->is_boolean() && v->get<bool>();
    };
    if (has_lo) n.minimum = lo, n.exclusive_minimum = flag("exclusiveMinimum");
    if (has_xlo && (!has_lo || xlo >= lo)) n.minimum = xlo, n.exclusive_minimum = true;
    if (has_hi) n.maximum = hi, n.exclusive_maximum = flag("exclusiveMaximum");
    if (has_xhi && (!has_hi || xhi <= hi)) n.maximum = xhi, n.exclusive_maximum = true;
    if (integer) {
      // Bounds as the integers they allow: inclusive.
      if (n.minimum > -1.0 / 0.0) {
        const double c = std::ceil(n.minimum);
        n.minimum = n.exclusive_minimum && c == n.minimum ? c + 1 : c;
        n.exclusive_minimum = false;
      }
      if (n.maximum < 1.0 / 0.0) {
        const double f = std::floor(n.maximum);
        n.maximum = n.exclusive_maximum && f == n.maximum ? f - 1 : f;
        n.exclusive_maximum = false;
      }
      if (n.minimum > n.maximum) return Error(where, "no integer between the bounds");
    } else if (n.minimum > n.maximum ||
               (n.minimum == n.maximum && (n.exclusive_minimum || n.exclusive_maximum))) {
      return Error(where, "no number between the bounds");
    }
    return Status::Ok();
  }

  Status Literals(int node, const json& s, const std::vector<std::string>& types,
                  const std::string& where) {
    for (const auto& [key, v] : s.items())
      if (kTypeKeywords.count(key) && key != "type")
        return Error(where, "'" + key + "' beside enum or const");
    std::vector<json> values;
    if (const auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty())
        return Error(where + "/enum", "enum that is not a non-empty array");
      values = e->get<std::vector<json>>();
    }
    if (const auto c = s.find("const"); c != s.end()) {
      if (s.contains("enum")) {
        if (std::find(values.begin(), values.end(), *c) == values.end())
          values.clear();
        else
          values = {*c};
      } else {
        values = {*c};
      }
    }
    std::vector<std::string> texts;
    for (const json& v : values) {
      bool typed = false;
      for (const std::string& t : types) typed = typed || HasType(v, t);
      const std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
      if (typed && std::find(texts.begin(), texts.end(), text) == texts.end())
        texts.push_back(text);
    }
    if (texts.empty()) return Error(where, "enum or const with no value of the schema's type");
    if (texts.size() > kMaxMembers) return Error(where + "/enum", "over 64 values");
    N(node).kind = Kind::kLiterals;
    N(node).literals = std::move(texts);
    return Status::Ok();
  }

  // Each node's shortest instance (SchemaNode::shortest, a least fixpoint).
  // Every node must have a finite one, else the matcher could enter a value
  // it can never end.
  Status Measure() {
    constexpr uint64_t kNone = UINT64_MAX;
    const auto add = [](uint64_t a, uint64_t b) { return a >= kNone - b ? kNone : a + b; };
    for (SchemaNode& n : g_->nodes) n.shortest = kNone;
    for (bool changed = true; changed;) {
      changed = false;
      for (SchemaNode& n : g_->nodes) {
        uint64_t len = kNone;
        switch (n.kind) {
          case Kind::kAnyOf:
            for (int a : n.alternatives) len = std::min(len, N(a).shortest);
            break;
          case Kind::kLiterals:
            for (const std::string& t : n.literals) len = std::min<uint64_t>(len, t.size());
            break;
          case Kind::kString:
            len = add(2, n.min_length);  // '"', one byte a character, '"'
            break;
          case Kind::kNumber: {
            // 0 when the bounds hold it; else about the nearer bound's digits.
            const double near = n.minimum > 0 ? n.minimum : n.maximum < 0 ? n.maximum : 0;
            len = near == 0 ? 1 : 2 + static_cast<uint64_t>(std::log10(std::fabs(near) + 1));
            break;
          }
          case Kind::kArray: {
            const uint64_t item = n.min_items == 0 ? 0 : add(N(n.items).shortest, 1);
            len = item == 0 ? 2 : item > (kNone - 2) / n.min_items ? kNone : 2 + n.min_items * item;
            break;
          }
          case Kind::kObject:
            len = 2;
            for (const auto& p : n.properties)
              if (p.required) len = add(len, add(p.key.size() + 4, N(p.node).shortest));
            break;
        }
        if (len < n.shortest) n.shortest = len, changed = true;
      }
    }
    for (size_t i = 0; i < g_->nodes.size(); ++i)
      if (g_->nodes[i].shortest == kNone)
        return Error(paths_[i], "a schema with no finite instance");
    return Status::Ok();
  }

  const json& root_;
  SchemaOptions o_;
  JsonGrammar* g_ = nullptr;
  std::vector<std::string> paths_;  // each node's place in the schema, for errors
  std::map<std::string, int> refs_;
  int any_ = -1;
};

}  // namespace

Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(const json& schema,
                                                             const SchemaOptions& options) {
  return Compiler(schema, options).Run();
}

std::shared_ptr<const JsonGrammar> AnyJsonObject() {
  static const std::shared_ptr<const JsonGrammar> g = Compiler(json(), {}).Any(true);
  return g;
}

}  // namespace waste::grammar
