"""docs/api/openapi.yaml stays true: the real gpuqd's answers validate against
the schemas it declares (types, required fields, enums, nullability, no
properties it does not know of where it says so), and every call README.md
documents is described in it."""

import os
import re

import pytest

from gpuq_harness import ROOT, FakeWorker

import yaml  # noqa: E402  python3-yaml: scripts/install-deps installs it

SPEC_PATH = os.path.join(ROOT, "docs", "api", "openapi.yaml")
README_PATH = os.path.join(ROOT, "docs", "api", "README.md")


@pytest.fixture(scope="module")
def spec():
    with open(SPEC_PATH) as f:
        return yaml.safe_load(f)


def resolve(spec, schema):
    while "$ref" in schema:
        node = spec
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    return schema


TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
         "integer": int, "number": (int, float)}


def check(spec, schema, value, where="$"):
    """Validates value against the OpenAPI 3.0 subset the file uses; returns a
    list of problems."""
    schema = resolve(spec, schema)
    if "allOf" in schema:
        return [p for s in schema["allOf"] for p in check(spec, s, value, where)]
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null but not nullable"]
    problems = []
    t = schema.get("type")
    if t:
        ok = isinstance(value, TYPES[t]) and not (t in ("integer", "number")
                                                   and isinstance(value, bool))
        if not ok:
            return [f"{where}: {value!r} is not {t}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    if t == "integer" or t == "number":
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: {value} > {schema['maximum']}")
    if t == "string" and "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                problems.append(f"{where}: missing required {k}")
        for k, v in value.items():
            if k in props:
                problems += check(spec, props[k], v, f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}: {k} is not declared")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            problems += check(spec, schema["items"], v, f"{where}[{i}]")
    return problems


def answer_schema(spec, path, method, status):
    op = spec["paths"][path][method]
    resp = resolve(spec, op["responses"][str(status)])
    return resp["content"]["application/json"]["schema"]


def assert_valid(spec, path, method, r):
    assert str(r.status) in spec["paths"][path][method]["responses"], \
        f"{method.upper()} {path}: status {r.status} is not described"
    problems = check(spec, answer_schema(spec, path, method, r.status), r.json())
    assert not problems, f"{method.upper()} {path} -> {r.status}: {problems}"


def test_cli_openapi_describes_every_call_of_the_readme(spec):
    with open(README_PATH) as f:
        text = f.read()
    calls = set(re.findall(r"`(GET|POST|DELETE) (/[^`?\s\[]*)", text))
    assert calls, "no calls found in README.md"
    for method, path in calls:
        assert path in spec["paths"], f"{path} missing from openapi.yaml"
        assert method.lower() in spec["paths"][path], f"{method} {path} missing"


def test_cli_openapi_matches_the_real_answers(spec, head):
    key = head.add_tenant("acme")
    api = head.client(key)
    admin = head.admin()

    r = api.post("/v1/jobs", {"capability": "image.fast", "model": "image-v2",
                              "params": {"prompt": "a fox", "width": 512, "height": 512,
                                         "steps": 20, "seed": 7},
                              "lane": "batch", "priority": "free", "idempotency_key": "k1"})
    assert r.status == 201
    assert_valid(spec, "/v1/jobs", "post", r)
    jid = r.json()["id"]
    assert_valid(spec, "/v1/jobs", "post",
                 api.post("/v1/jobs", {"capability": "image.fast", "model": "image-v2",
                                       "params": {"prompt": "a fox", "width": 512,
                                                  "height": 512, "steps": 20, "seed": 7},
                                       "lane": "batch", "priority": "free",
                                       "idempotency_key": "k1"}))
    assert_valid(spec, "/v1/jobs", "get", api.get("/v1/jobs?limit=1"))
    assert_valid(spec, "/v1/jobs/{id}", "get", api.get(f"/v1/jobs/{jid}"))
    assert_valid(spec, "/v1/jobs/{id}", "get", api.get("/v1/jobs/999999"))
    assert_valid(spec, "/v1/jobs/{id}/result", "get", api.get(f"/v1/jobs/{jid}/result"))
    assert_valid(spec, "/v1/jobs", "post", api.post("/v1/jobs", {"capability": "image.fast",
                                                                  "params": {"width": 5}}))
    assert_valid(spec, "/v1/jobs", "post", api.post("/v1/jobs", {"capability": "x", "bad": 1}))
    assert_valid(spec, "/v1/jobs", "get", api.get("/v1/jobs", key="gq_wrong"))

    assert_valid(spec, "/v1/tenants", "post", admin.post("/v1/tenants", {"name": "globex"}))
    assert_valid(spec, "/v1/tenants", "get", admin.get("/v1/tenants"))
    assert_valid(spec, "/v1/tenants", "get", api.get("/v1/tenants"))
    r = admin.post("/v1/worker-tokens", {"name": "rack1"})
    assert_valid(spec, "/v1/worker-tokens", "post", r)

    w = FakeWorker(head, r.json()["token"], "rack1-gpu0").start()
    assert_valid(spec, "/v1/workers", "get", admin.get("/v1/workers"))
    a = w.poll(wait=5)
    assert a is not None
    assert w.progress(a, "generating", 0.5).status == 200
    assert_valid(spec, "/v1/jobs/{id}", "get", api.get(f"/v1/jobs/{a['job_id']}"))
    assert w.complete(a).status == 200
    assert_valid(spec, "/v1/jobs/{id}", "get", api.get(f"/v1/jobs/{a['job_id']}"))
    r = api.post("/v1/jobs", {"capability": "image.fast"})
    assert_valid(spec, "/v1/jobs/{id}", "delete", api.delete(f"/v1/jobs/{r.json()['id']}"))
    assert_valid(spec, "/v1/jobs/{id}", "delete", api.delete(f"/v1/jobs/{r.json()['id']}"))
    assert_valid(spec, "/v1/workers/{id}/drain", "post",
                 admin.post("/v1/workers/rack1-gpu0/drain"))
    assert_valid(spec, "/v1/workers/{id}/drain", "post", admin.post("/v1/workers/nope/drain"))

    assert_valid(spec, "/healthz", "get", head.client(None).get("/healthz"))
    assert_valid(spec, "/readyz", "get", head.client(None).get("/readyz"))
