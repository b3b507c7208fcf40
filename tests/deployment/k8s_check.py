#!/usr/bin/env python3
"""docker/kubernetes: the fedlgc tree as Kubernetes manifests, validated here (no cluster).

1. docker/kubernetes/gen-k8s.sh renders the tree for 4 edges under 2 aggregators and for
   6 under 3; the committed fedlgc.yaml and edges.yaml are its output for the defaults.
2. Every object validates against the Kubernetes API's OpenAPI schemas (npm
   kubernetes-models, tests/deployment/k8s_schema.mjs).
3. What no schema knows, checked against the binaries and the certificates:
   - every flag a container passes is one its binary (BIN_DIR) takes, and every $(VAR) in
     its args is an env var it declares;
   - selectors match their pod templates; probes name declared ports; every Secret and
     PersistentVolumeClaim a pod mounts exists, with the keys the binary reads;
   - the tree adds up: the root's quorum is the aggregator count, each aggregator's quorum
     is the edges that point at it, every edge points at an aggregator pod that exists
     (aggregator-N.aggregator), the shards cover 0..N-1 once, and each edge's certificate is
     for the id it claims (openssl);
   - an edge Deployment never runs two pods of one identity (1 replica, Recreate).
4. The checks can fail: broken copies (a wrong port type, an unknown flag, a missing
   Secret, an edge pointing at no aggregator, a quorum that does not add up) are refused.

  k8s_check.py BIN_DIR SOURCE_DIR
Exit 77 (skip) when node or kubernetes-models is missing (scripts/setup.sh installs them).
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

PREFIX = os.environ.get("FEDLGC_NODE_PREFIX", "/usr/local/lib/fedlgc-node")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def render(src, out, edges, aggs):
    subprocess.run([f"{src}/docker/kubernetes/gen-k8s.sh", "-n", str(edges), "-a", str(aggs),
                    "-o", out, "-c", f"{out}/certs"], check=True, stdout=subprocess.DEVNULL)
    return {name: load(f"{out}/{name}.yaml") for name in ("fedlgc", "edges", "secrets")}


def schema_errors(src, objects):
    r = subprocess.run(["node", f"{src}/tests/deployment/k8s_schema.mjs"], input=json.dumps(objects),
                       text=True, capture_output=True, env=dict(os.environ, FEDLGC_NODE_PREFIX=PREFIX))
    if r.returncode == 2:
        raise SystemExit(f"FAIL: {r.stdout}{r.stderr}")
    return [line for line in r.stdout.splitlines() if not line.startswith("ok ")] + (
        [r.stderr.strip()] if r.returncode not in (0, 1) else [])


def flags_of(binary):
    text = subprocess.run([binary, "--help"], check=True, text=True, capture_output=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text))


def pods(objects):
    """(workload, pod spec) of every Deployment and StatefulSet."""
    return [(o, o["spec"]["template"]["spec"]) for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")]


def arg_value(args, flag):
    for a in args:
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def cert_cn(pem):
    r = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253"],
                       input=pem, capture_output=True, check=True)
    m = re.search(r"CN=([^,\n]+)", r.stdout.decode())
    return m.group(1) if m else None


def semantic_errors(objects, binaries):
    import base64
    errors = []
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    secrets = by_kind.get("Secret", {})
    claims = by_kind.get("PersistentVolumeClaim", {})
    images = {"fedlgc/coordinator": binaries["coordinator"], "fedlgc/edge": binaries["edge"]}
    for w, spec in pods(objects):
        name = f"{w['kind']}/{w['metadata']['name']}"
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        for k, v in w["spec"]["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                errors.append(f"{name}: selector {k}={v} does not match its pod template")
        claim_templates = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            image = c["image"].split(":")[0]
            known = images.get(image)
            if known is None:
                errors.append(f"{name}: image {c['image']} is not a fedlgc image")
                continue
            env = {e["name"] for e in c.get("env", [])}
            for a in c.get("args", []):
                flag = a.split("=", 1)[0]
                if flag not in known:
                    errors.append(f"{name}: {image} takes no flag {flag}")
                for var in re.findall(r"\$\((\w+)\)", a):
                    if var not in env:
                        errors.append(f"{name}: {a} names $({var}), which is not in its env")
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    errors.append(f"{name}: {probe} names port {port}, which it does not declare")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes and m["name"] not in claim_templates:
                    errors.append(f"{name}: mounts {m['name']}, which is not a volume of its pod")
        for v in volumes.values():
            if "secret" in v and v["secret"]["secretName"] not in secrets:
                errors.append(f"{name}: Secret {v['secret']['secretName']} does not exist")
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in claims:
                errors.append(f"{name}: claim {v['persistentVolumeClaim']['claimName']} does not exist")
    # The tree.
    stateful = by_kind.get("StatefulSet", {})
    root, agg = stateful.get("coordinator"), stateful.get("aggregator")
    if root is None or agg is None:
        return errors + ["no StatefulSet coordinator and aggregator"]
    aggs = agg["spec"]["replicas"]
    root_args = root["spec"]["template"]["spec"]["containers"][0]["args"]
    if arg_value(root_args, "--min-clients") != str(aggs):
        errors.append(f"the root's --min-clients is {arg_value(root_args, '--min-clients')}, "
                      f"not its {aggs} aggregators")
    agg_args = agg["spec"]["template"]["spec"]["containers"][0]["args"]
    if arg_value(agg_args, "--parent") != "coordinator:50051":
        errors.append("the aggregators' --parent is not the root's Service")
    agg_certs = secrets.get("fedlgc-aggregators", {}).get("data", {})
    for i in range(aggs):
        for ext in ("pem", "key"):
            if f"agg-{i}.{ext}" not in agg_certs:
                errors.append(f"fedlgc-aggregators has no agg-{i}.{ext} for pod aggregator-{i}")
        if f"agg-{i}.pem" in agg_certs and cert_cn(base64.b64decode(agg_certs[f"agg-{i}.pem"])) != f"agg-{i}":
            errors.append(f"agg-{i}.pem is not agg-{i}'s certificate")
    edges = by_kind.get("Deployment", {})
    under = [0] * aggs
    shards = []
    for name, d in edges.items():
        if d["spec"].get("replicas") != 1 or d["spec"].get("strategy", {}).get("type") != "Recreate":
            errors.append(f"Deployment/{name} may run its identity twice (1 replica, Recreate)")
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        server = arg_value(args, "--server") or ""
        m = re.fullmatch(r"aggregator-(\d+)\.aggregator:50051", server)
        if not m or int(m.group(1)) >= aggs:
            errors.append(f"Deployment/{name}: --server={server} is no aggregator pod")
        else:
            under[int(m.group(1))] += 1
        shards.append(int(arg_value(args, "--shard") or -1))
        if arg_value(args, "--num-shards") != str(len(edges)):
            errors.append(f"Deployment/{name}: --num-shards is not the {len(edges)} edges")
        ident = arg_value(args, "--id")
        secret = next((v["secret"]["secretName"] for v in d["spec"]["template"]["spec"]["volumes"]
                       if "secret" in v), None)
        pem = secrets.get(secret, {}).get("data", {}).get("client.pem")
        if pem is None or cert_cn(base64.b64decode(pem)) != ident:
            errors.append(f"Deployment/{name}: its Secret holds no certificate for {ident}")
    if sorted(shards) != list(range(len(edges))):
        errors.append(f"the shards {sorted(shards)} do not cover 0..{len(edges) - 1} once")
    quorum = arg_value(agg_args, "--min-clients")
    for i, n in enumerate(under):
        if str(n) != quorum:
            errors.append(f"aggregator-{i} has {n} edges; its --min-clients is {quorum}")
    return errors


def check(src, objects, binaries):
    return schema_errors(src, objects) + semantic_errors(objects, binaries)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if shutil.which("node") is None or not os.path.isdir(f"{PREFIX}/node_modules/kubernetes-models"):
        print(f"SKIP: node and {PREFIX}/node_modules/kubernetes-models are needed "
              "(scripts/setup.sh installs them)")
        sys.exit(77)
    binaries = {"coordinator": flags_of(f"{bin_dir}/fedlgc-coordinator"),
                "edge": flags_of(f"{bin_dir}/fedlgc-edge")}
    with tempfile.TemporaryDirectory() as tmp:
        for edges, aggs in ((4, 2), (6, 3)):
            out = f"{tmp}/{edges}x{aggs}"
            rendered = render(src, out, edges, aggs)
            objects = [o for docs in rendered.values() for o in docs]
            errors = check(src, objects, binaries)
            if errors:
                raise SystemExit("FAIL: " + f"{edges} edges under {aggs} aggregators:\n  " +
                                 "\n  ".join(errors))
            print(f"ok: {len(objects)} objects for {edges} edges under {aggs} aggregators")
            if (edges, aggs) == (4, 2):
                for name in ("fedlgc", "edges"):
                    committed = open(f"{src}/docker/kubernetes/{name}.yaml").read()
                    if committed != open(f"{out}/{name}.yaml").read():
                        raise SystemExit(f"FAIL: docker/kubernetes/{name}.yaml is not what "
                                         "gen-k8s.sh writes now: run docker/kubernetes/gen-k8s.sh")
                print("ok: the committed fedlgc.yaml and edges.yaml are gen-k8s.sh's output")
                base = objects
        # Broken copies must be refused.
        def mutate(what, change):
            named = {f"{o['kind']}/{o['metadata']['name']}": o for o in copy.deepcopy(base)}
            change(named)
            errors = check(src, list(named.values()), binaries)
            if not errors:
                raise SystemExit(f"FAIL: a broken copy passed: {what}")
            print(f"ok: refused {what}: {errors[0]}")

        def container(objs, name):
            return objs[name]["spec"]["template"]["spec"]["containers"][0]

        mutate("a port given as text",
               lambda o: container(o, "Deployment/edge-1")["ports"][0].update(containerPort="9464"))
        mutate("a flag the edge does not take",
               lambda o: container(o, "Deployment/edge-2")["args"].append("--no-such-flag=1"))
        mutate("a Secret that does not exist",
               lambda o: o.pop("Secret/fedlgc-edge-3"))
        mutate("an edge under an aggregator that does not exist",
               lambda o: container(o, "Deployment/edge-4")["args"].__setitem__(
                   0, "--server=aggregator-7.aggregator:50051"))
        mutate("a root quorum that is not the aggregator count",
               lambda o: o["StatefulSet/aggregator"]["spec"].update(replicas=3))
        mutate("an edge with another edge's certificate",
               lambda o: o["Secret/fedlgc-edge-1"]["data"].update(
                   o["Secret/fedlgc-edge-2"]["data"]))
    print("PASS: docker/kubernetes validates")


if __name__ == "__main__":
    main()
