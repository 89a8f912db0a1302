#!/usr/bin/env python3
"""The JSON Schema corpus of engine/grammar's tests, classified by `jsonschema`.

Writes tests/fixtures/json_schema/corpus.json:
  {"schemas": [{"name", "schema", "strict", "instances": [{"text", "valid"}]}],
   "refused": [{"name", "schema", "strict", "names"}]}
Each instance's "valid" is jsonschema's Draft202012Validator verdict on the
parsed text; the C++ matcher must agree on every one. Instances are written
compact and as json.dumps writes them (", " and ": "), within the matcher's
documented dialect (no escaped or duplicate keys, integers without a
fraction, no exponent on bounded numbers, an enum's arrays and objects
written compact). "refused" schemas use what the
engine refuses; "names" is the keyword its error must name.

Run once: python3 tools/json_schema/make_fixtures.py (needs jsonschema).
"""
import copy
import json
import os
import random

import jsonschema

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "json_schema")

SCHEMAS = [
    ("person", False, {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 20},
                       "age": {"type": "integer", "minimum": 0, "maximum": 150},
                       "email": {"type": "string"}},
        "required": ["name", "age"],
        "additionalProperties": False},
     [{"name": "Ada", "age": 36}, {"name": "Bob", "age": 0, "email": "b@x.org"}]),
    ("strict_weather", True, {
        "type": "object",
        "properties": {"city": {"type": "string"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 14},
                       "detail": {"type": ["boolean", "null"]}},
        "required": ["city", "unit", "days", "detail"],
        "additionalProperties": False},
     [{"city": "Paris", "unit": "celsius", "days": 3, "detail": None},
      {"city": "Oslo", "unit": "fahrenheit", "days": 14, "detail": True}]),
    ("nested", False, {
        "type": "object",
        "properties": {
            "order": {"type": "object",
                      "properties": {"id": {"type": "integer"},
                                     "lines": {"type": "array", "minItems": 1, "maxItems": 3,
                                               "items": {"type": "object",
                                                         "properties": {"sku": {"type": "string"},
                                                                        "qty": {"type": "integer", "exclusiveMinimum": 0}},
                                                         "required": ["sku", "qty"],
                                                         "additionalProperties": False}}},
                      "required": ["id", "lines"],
                      "additionalProperties": False}},
        "required": ["order"]},
     [{"order": {"id": 7, "lines": [{"sku": "A1", "qty": 2}]}},
      {"order": {"id": -3, "lines": [{"sku": "", "qty": 1}, {"sku": "B", "qty": 9}]}, "note": "x"}]),
    ("tags", False, {
        "type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 2, "maxItems": 4},
     [["a", "b"], ["abcde", "", "x", "yy"]]),
    ("number_bounds", False, {
        "type": "object",
        "properties": {"ratio": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                       "temp": {"type": "number", "minimum": -40.5, "maximum": 60},
                       "score": {"type": "integer", "exclusiveMinimum": -10, "maximum": 10}},
        "required": ["ratio", "temp", "score"],
        "additionalProperties": False},
     [{"ratio": 0.25, "temp": -12.75, "score": -9}, {"ratio": 0, "temp": 60, "score": 10}]),
    ("any_of", False, {
        "anyOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                   "required": ["kind", "r"], "additionalProperties": False},
                  {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"},
                                                    "h": {"type": "number"}},
                   "required": ["kind", "w", "h"], "additionalProperties": False},
                  {"type": "string"}]},
     [{"kind": "circle", "r": 1.5}, {"kind": "rect", "w": 2, "h": 3e2}, "none"]),
    ("defs_tree", False, {
        "$defs": {"node": {"type": "object",
                           "properties": {"value": {"type": "integer"},
                                          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
     [{"value": 1}, {"value": 1, "children": [{"value": 2, "children": []}, {"value": 3}]}]),
    ("definitions_enum", False, {
        "definitions": {"color": {"enum": ["red", "green", 3, None, [1, 2], {"a": 1}]}},
        "type": "object",
        "properties": {"c": {"$ref": "#/definitions/color"},
                       "flag": {"type": "boolean"}},
        "required": ["c"],
        "additionalProperties": {"type": "integer"}},
     [{"c": "red"}, {"c": [1, 2], "flag": False, "extra": 5}, {"c": None, "n": -1}]),
    ("nullable", False, {
        "type": "object",
        "properties": {"maybe": {"type": ["string", "null"], "maxLength": 3},
                       "list": {"type": ["array", "null"], "items": {"type": "number"}}},
        "required": ["maybe"],
        "additionalProperties": False},
     [{"maybe": None}, {"maybe": "abc", "list": [1, 2.5, -3]}, {"maybe": "", "list": None}]),
    ("free", False, {},
     [{"anything": [1, {"b": None}], "x": "y"}, [1, "two", 3.0], "text", 12, True, None]),
    ("unicode", False, {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 2, "maxLength": 4}},
        "required": ["text"],
        "additionalProperties": False},
     [{"text": "h\u00e9"}, {"text": "\u65e5\u672c\u8a9e"}, {"text": "a\"b\\"}]),
]

REFUSED = [
    ("pattern", False, {"type": "object", "properties": {"id": {"type": "string", "pattern": "^a"}}}, "pattern"),
    ("format", False, {"type": "string", "format": "date"}, "format"),
    ("one_of", False, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf"),
    ("all_of", False, {"allOf": [{"type": "string"}]}, "allOf"),
    ("not", False, {"not": {"type": "string"}}, "not"),
    ("if_then", False, {"if": {"type": "string"}, "then": {"minLength": 1}}, "if"),
    ("pattern_properties", False, {"type": "object", "patternProperties": {"^x": {}}}, "patternProperties"),
    ("strict_extra", True, {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "additionalProperties"),
    ("strict_optional", True, {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                               "required": ["a"], "additionalProperties": False}, "required"),
    ("bad_ref", False, {"$ref": "https://example.com/s.json"}, "$ref"),
    ("empty_range", False, {"type": "integer", "minimum": 5, "maximum": 4}, "integer"),
    ("infinite", False, {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                                         "required": ["next"]}}, "$ref": "#/$defs/n"}, "finite"),
]


def mutations(value, rng):
    """Values near `value`: each with one thing changed."""
    out = []
    if isinstance(value, dict):
        for k in list(value):
            d = dict(value)
            del d[k]
            out.append(d)
            for v in ["", "long string beyond limits", 0, -1, 1.5, 1000, None, True, [], {}]:
                e = dict(value)
                e[k] = v
                out.append(e)
            for sub in mutations(value[k], rng)[:6]:
                e = dict(value)
                e[k] = sub
                out.append(e)
        d = dict(value)
        d["zzz"] = 1
        out.append(d)
    elif isinstance(value, list):
        out += [value[:-1], value + value[:1], [], value + [None]]
        for i, v in enumerate(value):
            for sub in mutations(v, rng)[:4]:
                out.append(value[:i] + [sub] + value[i + 1:])
    elif isinstance(value, str):
        out += [value + "x", value[:-1], "", value * 4, 7]
    elif isinstance(value, bool) or value is None:
        out += [not value if isinstance(value, bool) else 0, "null", None if value is not None else False]
    elif isinstance(value, (int, float)):
        scaled = value * 1000
        out += [value + 1, value - 1, -value, value + 0.5, int(scaled) if scaled == int(scaled) else scaled,
                str(value), 0, 1001]
    return out


def texts(value, compact_only):
    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return [compact] if compact_only else sorted({compact, json.dumps(value, ensure_ascii=False)})


def main():
    rng = random.Random(41)
    corpus = {"schemas": [], "refused": []}
    for name, strict, schema, seeds in SCHEMAS:
        validator = jsonschema.Draft202012Validator(schema)
        values = list(seeds)
        for s in seeds:
            values += mutations(copy.deepcopy(s), rng)
        seen, instances = set(), []
        for v in values:
            # An enum's arrays and objects are matched as their compact text.
            for t in texts(v, compact_only=name == "definitions_enum"):
                if t in seen:
                    continue
                seen.add(t)
                instances.append({"text": t, "valid": validator.is_valid(json.loads(t))})
        corpus["schemas"].append({"name": name, "schema": schema, "strict": strict, "instances": instances})
    for name, strict, schema, names in REFUSED:
        corpus["refused"].append({"name": name, "schema": schema, "strict": strict, "names": names})
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(s["instances"]) for s in corpus["schemas"])
    v = sum(i["valid"] for s in corpus["schemas"] for i in s["instances"])
    print(f"{len(corpus['schemas'])} schemas, {n} instances ({v} valid), {len(corpus['refused'])} refused")


if __name__ == "__main__":
    main()
