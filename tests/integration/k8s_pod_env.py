#!/usr/bin/python3
"""Prints the environment each pod of deploy/k8s/psrt-indexed-job.yaml gets, as Kubernetes would
set it: one block per completion index, `KEY=VALUE` lines, then `ARGV` with the container's
command joined by spaces and an empty line. Checks what ties the objects together (headless
Service selecting the pods, the subdomain, the secret mount, sizes) and exits 1 naming a mismatch.
Usage: k8s_pod_env.py MANIFEST"""
import sys

import yaml


def fail(why):
    print(f"k8s_pod_env.py: {why}", file=sys.stderr)
    sys.exit(1)


def main():
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    by_kind = {d["kind"]: d for d in docs}
    for kind in ("Service", "Secret", "Job"):
        if kind not in by_kind:
            fail(f"no {kind} in the manifest")
    svc, secret, job = by_kind["Service"], by_kind["Secret"], by_kind["Job"]
    spec = job["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    if spec.get("completionMode") != "Indexed":
        fail("the Job is not an Indexed Job")
    if svc["spec"].get("clusterIP") != "None":
        fail("the Service is not headless (clusterIP: None)")
    if any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        fail("the Service's selector does not match the pod labels")
    if pod.get("subdomain") != svc["metadata"]["name"]:
        fail("the pods' subdomain is not the Service's name")
    n = spec["completions"]
    if spec["parallelism"] != n:
        fail("parallelism != completions: every pod must run at once")
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for index in range(n):
        env = {}
        for e in container["env"]:
            if "value" in e:
                env[e["name"]] = str(e["value"])
                continue
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path == "metadata.annotations['batch.kubernetes.io/job-completion-index']":
                env[e["name"]] = str(index)
            elif path == "status.podIP":
                env[e["name"]] = f"10.244.0.{10 + index}"
            else:
                fail(f"{e['name']}: unknown fieldRef {path}")
        if "PSRT_SECRET_FILE" in env:
            name = next((k for k, p in mounts.items() if env["PSRT_SECRET_FILE"].startswith(p + "/")), None)
            if name is None or volumes[name]["secret"]["secretName"] != secret["metadata"]["name"]:
                fail("PSRT_SECRET_FILE is not in the mounted Secret")
            if volumes[name]["secret"].get("defaultMode") != 0o600:
                fail("the secret volume's defaultMode is not 0600 (psrt refuses a readable secret)")
        for k in sorted(env):
            print(f"{k}={env[k]}")
        print("ARGV " + " ".join(container["command"] + container.get("args", [])))
        print()
    print(f"SECRET {secret['stringData']['secret']}")
    print(f"SERVICE_PORT {svc['spec']['ports'][0]['port']}")
    print(f"HOSTNAME_0 {job['metadata']['name']}-0.{svc['metadata']['name']}")


main()
