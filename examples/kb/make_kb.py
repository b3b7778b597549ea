#!/usr/bin/env python3
"""Writes examples/kb/data.log: a sample engineering knowledge base for helix-bg.

Twelve topics, a few hundred entries composed from per-topic vocabulary, plus
planted findings listed in README.md:
  - near-duplicates: an entry and a light rewording of it (same topic),
  - cross-topic relations: two entries in different topics about the same thing,
  - a deletion and a malformed line (the reader must skip it and say so).
Deterministic: python3 examples/kb/make_kb.py > examples/kb/data.log
"""
import json
import random

TOPICS = {
    "databases": (["postgres", "index", "vacuum", "replica", "query planner", "connection pool", "WAL", "deadlock",
                   "transaction", "schema migration"], ["slow", "bloated", "locked", "lagging", "missing"]),
    "networking": (["TCP", "DNS resolver", "load balancer", "TLS handshake", "MTU", "keepalive", "proxy",
                    "packet loss", "BGP session", "NAT table"], ["dropped", "timed out", "flapping", "misrouted"]),
    "kubernetes": (["pod", "node pool", "HPA", "ingress", "helm chart", "liveness probe", "PVC", "namespace quota",
                    "kubelet", "CrashLoopBackOff"], ["evicted", "pending", "restarted", "throttled"]),
    "frontend": (["React component", "bundle size", "hydration", "CSS grid", "service worker", "web vitals",
                  "lazy loading", "form validation", "design tokens", "accessibility audit"], ["janky", "broken", "slow"]),
    "security": (["TLS certificate", "API key", "OAuth token", "CVE", "secret rotation", "audit log", "RBAC policy",
                  "SSO login", "dependency scan", "WAF rule"], ["leaked", "expired", "revoked", "exposed"]),
    "ml-inference": (["quantized model", "KV cache", "batch size", "tokenizer", "GPU kernel", "embedding model",
                      "prefill", "decode step", "attention", "throughput"], ["regressed", "diverged", "OOM", "slow"]),
    "observability": (["dashboard", "alert", "trace", "log pipeline", "metric cardinality", "SLO", "p99 latency",
                       "on-call page", "sampling rate", "Prometheus"], ["noisy", "missing", "delayed", "flapping"]),
    "ci-cd": (["pipeline", "flaky test", "build cache", "release branch", "canary deploy", "rollback", "artifact",
               "docker image", "merge queue", "feature flag"], ["red", "stuck", "slow", "broken"]),
    "storage": (["S3 bucket", "disk quota", "RAID array", "snapshot", "object lifecycle", "fsync", "inode",
                 "block device", "backup job", "compaction"], ["full", "corrupted", "slow", "failed"]),
    "incidents": (["outage", "postmortem", "customer impact", "war room", "status page", "root cause",
                   "timeline", "mitigation", "follow-up action", "severity"], ["major", "partial", "repeated"]),
    "hiring": (["interview loop", "take-home task", "job description", "referral", "onboarding plan", "offer",
                "sourcing", "debrief", "career ladder", "mentor"], ["delayed", "accepted", "declined"]),
    "cost": (["cloud bill", "reserved instance", "spot fleet", "egress traffic", "idle cluster", "storage tier",
              "budget alert", "rightsizing", "GPU hours", "savings plan"], ["doubled", "spiked", "wasted", "cut"]),
}

NEAR_DUPS = [
    ("databases", "Postgres autovacuum falling behind",
     "Autovacuum on the orders table cannot keep up with the update rate, so dead tuples pile up, the table bloats to "
     "three times its size and sequential scans slow down; raising autovacuum_vacuum_cost_limit fixed it."),
    ("networking", "DNS resolver timeouts in the staging VPC",
     "Pods in staging intermittently fail to resolve internal service names because the DNS resolver drops UDP "
     "packets under load; enabling NodeLocal DNSCache and retries over TCP made the timeouts disappear."),
    ("ml-inference", "KV cache in f16 halves decode memory",
     "Storing the KV cache in f16 instead of f32 halves its memory, lets us double the batch size for decode, and "
     "changes greedy outputs only at near-ties in the logits."),
    ("security", "Rotate the leaked staging API key",
     "A staging API key was committed to the public repository; we revoked it, rotated every secret in that vault "
     "path, and added a pre-commit secret scanner to block the next one."),
    ("ci-cd", "Flaky integration test in the merge queue",
     "The payments integration test fails about one run in twenty because it depends on wall-clock time; the merge "
     "queue retries hide it, so we quarantined the test and injected a fake clock."),
    ("storage", "Nightly backup job misses fsync",
     "The nightly backup job renamed the archive before calling fsync, so a crash right after could leave an empty "
     "file; it now writes to a temp file, calls fsync, then renames atomically."),
    ("cost", "Idle GPU cluster burning money on weekends",
     "The training GPU cluster stays up over weekends with zero jobs, which is a fifth of the monthly cloud bill; a "
     "scale-to-zero schedule for Saturday and Sunday cuts that cost entirely."),
    ("kubernetes", "Liveness probe kills slow-starting pods",
     "The Java service needs ninety seconds to warm up, but its liveness probe starts after ten seconds and kills "
     "the pod into CrashLoopBackOff; a startupProbe with a longer budget fixed the restarts."),
]

REWORD = {"fixed it": "solved the problem", "made the timeouts disappear": "removed the timeouts",
          "we revoked it": "we revoked the key", "so we quarantined": "and so we quarantined", "now writes": "now first writes",
          "cuts that cost entirely": "removes that cost completely", "fixed the restarts": "stopped the restarts",
          "changes greedy outputs only": "only changes greedy outputs"}

CROSS = [
    (("databases", "Connection pool exhausted during the sale",
      "The Postgres connection pool hit its limit of 200 during the flash sale and requests queued for seconds; "
      "PgBouncer in transaction mode and a smaller per-pod pool solved the connection exhaustion."),
     ("incidents", "Postmortem: checkout outage during the flash sale",
      "Checkout was down for 40 minutes during the flash sale because the Postgres connection pool was exhausted and "
      "requests queued; the mitigation was PgBouncer in transaction mode and smaller per-pod pools.")),
    (("security", "TLS certificate expired on the API gateway",
      "The TLS certificate on the public API gateway expired at midnight because the renewal cron job had been "
      "failing silently for weeks; clients saw handshake errors until we renewed it by hand."),
     ("observability", "Alert on TLS certificate expiry",
      "We had no alert for TLS certificate expiry on the API gateway, so the renewal cron job failed silently; a new "
      "Prometheus alert fires 21 days before any certificate expires.")),
    (("ml-inference", "Quantized embedding model for search",
      "Switching the search embedding model to int8 quantization cut GPU hours by 60 percent with a recall drop under "
      "half a point, so batch embedding of the catalog now runs nightly."),
     ("cost", "GPU hours for embedding the catalog",
      "Embedding the product catalog with the quantized int8 model cut our GPU hours by 60 percent; the nightly batch "
      "embedding job is now the cheapest GPU workload we run.")),
    (("kubernetes", "Pods evicted when the node disk fills up",
      "Pods on the logging node pool were evicted because container logs filled the node disk; kubelet eviction "
      "thresholds and log rotation at 100 MB per container stopped the disk pressure."),
     ("storage", "Node disk full from container logs",
      "Container logs filled the node disk on the logging pool and kubelet started evicting pods; rotating logs at "
      "100 MB per container and a disk quota alert keep the disk below 70 percent.")),
    (("ci-cd", "Docker image build cache invalidated every run",
      "Our docker image build copies the whole repository before installing dependencies, so any change invalidates "
      "the build cache and every pipeline run takes 14 minutes instead of 3."),
     ("cost", "CI runners cost doubled after cache misses",
      "The CI runner bill doubled because the docker image build cache is invalidated on every pipeline run and each "
      "build takes 14 minutes; copying the dependency manifests first fixes the cache misses.")),
    (("networking", "Load balancer drops long-lived websocket connections",
      "The cloud load balancer closes idle websocket connections after 60 seconds, so dashboards lose live updates; "
      "a 30 second keepalive ping from the frontend keeps the connections open."),
     ("frontend", "Live dashboard stops updating after a minute",
      "The live dashboard stops updating after about a minute because the load balancer drops the idle websocket "
      "connection; the frontend now sends a keepalive ping every 30 seconds.")),
]


def reword(text):
    for a, b in REWORD.items():
        text = text.replace(a, b)
    return text


def main():
    r = random.Random(7)
    lines = []

    def add(obj):
        lines.append(json.dumps(obj, ensure_ascii=False))

    # filler: short notes built from each topic's own words, so that entries of
    # different topics share little vocabulary by accident
    day = 0
    for topic, (nouns, adjs) in TOPICS.items():
        for k in range(22):
            n1, n2, n3 = r.sample(nouns, 3)
            a1, a2 = r.choice(adjs), r.choice(adjs)
            text = f"{n1} {a1}; {n2} {a2} next, then {n3}."
            add({"topic": topic, "title": f"{n1} {a1} ({k + 1})", "text": text,
                 "tags": [topic, n1.split()[0].lower()], "ts": f"2026-10-{1 + day % 28:02d}T09:{k:02d}:00Z"})
            day += 1
    for topic, title, text in NEAR_DUPS:
        add({"topic": topic, "title": title, "text": text, "ts": "2026-11-02T10:00:00Z"})
    for (ta, tia, xa), (tb, tib, xb) in CROSS:
        add({"topic": ta, "title": tia, "text": xa, "ts": "2026-11-05T10:00:00Z"})
        add({"topic": tb, "title": tib, "text": xb, "ts": "2026-11-06T10:00:00Z"})
    for topic, title, text in NEAR_DUPS:
        add({"topic": topic, "title": title + " (again)", "text": reword(text), "ts": "2026-11-12T16:00:00Z"})
    # a retracted entry and its deletion, and a line a broken client wrote
    retracted = {"topic": "hiring", "title": "Draft offer letter", "text": "Draft: salary numbers for the senior "
                 "engineer offer; do not share.", "ts": "2026-11-13T09:00:00Z"}
    add(retracted)
    offset = sum(len(l.encode()) + 1 for l in lines[:-1])
    add({"delete": offset})
    lines.append('{"topic": "cost", "text": "truncated by a crashed writer')
    print("\n".join(lines))


if __name__ == "__main__":
    main()
