#!/usr/bin/python3
"""Validates ampc's JSON documents against their closed schemas (docs/schema/).

    tests/ci/schemas.py DOC.json...

Run with Debian's python3 and python3-jsonschema (tools/deps.txt).  It checks:
  - every schema file is a valid JSON Schema (draft 2020-12) and closed: each
    object lists every property as required, allows no other, and every
    property carries a description (what docs/report.md is generated from);
  - every document given validates against the schema its "schema" member
    names;
  - for each kind of document given, one with a key misspelled and one with a
    required field removed (at the top, and inside a nested object) are
    refused: the schema would catch a renamed or dropped field.
Prints one line per failure and exits 1 on any; 0 with a count otherwise.
"""
import copy
import json
import os
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator, RefResolver
except ImportError:
    sys.stderr.write("schemas.py: python3-jsonschema is missing (make deps)\n")
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_DIR = os.path.join(HERE, "..", "..", "docs", "schema")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def load_schemas():
    schemas = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".schema.json"):
            with open(os.path.join(SCHEMA_DIR, name)) as f:
                schemas[name] = json.load(f)
    return schemas


def check_closed(where, node):
    """Every object schema closed, every property described."""
    if isinstance(node, dict):
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        if "object" in types and "properties" in node:
            props = node["properties"]
            if node.get("additionalProperties") is not False:
                fail("%s: an object without additionalProperties: false" % where)
            if sorted(node.get("required", [])) != sorted(props):
                fail("%s: required is not every property" % where)
            for k, v in props.items():
                if "description" not in v:
                    fail("%s.%s: no description" % (where, k))
        if "items" in node and "description" not in node["items"] and "$ref" not in node["items"]:
            fail("%s: array items without a description" % where)
        for k, v in node.items():
            check_closed(where + "/" + k, v)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_closed("%s[%d]" % (where, i), v)


def validator_for(schemas, kind):
    name = kind + ".schema.json"
    if name not in schemas:
        return None
    store = {s["$id"]: s for s in schemas.values()}
    resolver = RefResolver.from_schema(schemas[name], store=store)
    return Draft202012Validator(schemas[name], resolver=resolver)


def errors(v, doc):
    return list(v.iter_errors(doc))


def nested_object(doc):
    """A path to an object inside the document (not the top), for the mutations."""
    for k, v in doc.items():
        if isinstance(v, dict) and v:
            return [k]
        if isinstance(v, list) and v and isinstance(v[0], dict) and v[0]:
            return [k, 0]
    return None


def at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def mutants(doc):
    """(what, document) pairs that the schema must refuse."""
    out = []
    for path in ([], nested_object(doc)):
        if path is None:
            continue
        first = next(iter(at(doc, path)))
        m = copy.deepcopy(doc)
        o = at(m, path)
        o[first[:-1] + first[-1].upper() + "x"] = o.pop(first)  # one key misspelled
        out.append(("misspelled key '%s' at %s" % (first, path or "the top"), m))
        m = copy.deepcopy(doc)
        del at(m, path)[first]  # one required field missing
        out.append(("missing field '%s' at %s" % (first, path or "the top"), m))
    return out


def main(paths):
    schemas = load_schemas()
    if not schemas:
        fail("no schema files in " + SCHEMA_DIR)
    for name, s in schemas.items():
        try:
            Draft202012Validator.check_schema(s)
        except jsonschema.exceptions.SchemaError as e:
            fail("%s: not a valid JSON Schema: %s" % (name, e.message))
        check_closed(name, s)
    seen_kinds = set()
    ndocs = nmut = 0
    for path in paths:
        with open(path) as f:
            try:
                doc = json.load(f)
            except ValueError as e:
                fail("%s: not JSON: %s" % (path, e))
                continue
        schema = doc.get("schema", "") if isinstance(doc, dict) else ""
        kind = schema[len("ampc-"):].split("/")[0] if schema.startswith("ampc-") else ""
        v = validator_for(schemas, kind)
        if not v:
            fail("%s: no schema file for '%s'" % (path, schema))
            continue
        errs = errors(v, doc)
        ndocs += 1
        for e in errs[:3]:
            fail("%s: %s at %s" % (path, e.message, "/".join(map(str, e.absolute_path))))
        if errs or kind in seen_kinds:
            continue
        seen_kinds.add(kind)
        for what, m in mutants(doc):
            nmut += 1
            if not errors(v, m):
                fail("%s: the schema accepts a document with a %s" % (path, what))
    if failures:
        return 1
    print("schemas: %d schema files closed and described, %d documents valid, %d broken "
          "documents refused (%s)" % (len(schemas), ndocs, nmut, ", ".join(sorted(seen_kinds))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
