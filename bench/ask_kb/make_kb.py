#!/usr/bin/env python3
"""bench/ask_kb/make_kb.py — a small labelled knowledge base for measuring
`helix-bg ask` (and serve's "kb" chats): the right-entry-cited rate.

Writes DIR/data.log (an ops team's notes: 36 entries in 6 topics, each fact
held by exactly one entry, with near-miss neighbours on the same subject so
retrieval has to choose) and DIR/questions.jsonl: one object per question,
{"q", "entry": the title of the entry holding the answer (null: the KB does
not know), "answer": a word the right answer contains}. Deterministic: the
same files every run. Also one deleted entry (a stale fact the answers must
not use) and nothing else unusual.

    python3 bench/ask_kb/make_kb.py OUT-DIR
"""
import json
import os
import sys

# (topic, title, text): the facts. Titles are unique: questions name their entry by title.
ENTRIES = [
    ("databases", "Postgres primary host",
     "The production Postgres primary runs on db-prod-3.internal, port 5433. The replica is db-prod-4.internal."),
    ("databases", "Postgres autovacuum tuning",
     "Autovacuum on the orders table was too slow; we set autovacuum_vacuum_cost_limit to 2000 in October."),
    ("databases", "Connection pool size",
     "PgBouncer runs in transaction mode with a pool size of 40 connections per service."),
    ("databases", "Nightly backup schedule",
     "Backups of the production database run every night at 02:30 UTC with pgBackRest and are kept for 35 days."),
    ("databases", "Replica lag alert",
     "The replica lag alert fires when db-prod-4 is more than 30 seconds behind the primary."),
    ("databases", "Slow query log threshold",
     "log_min_duration_statement is 250 ms on production, so every query slower than 250 ms is logged."),
    ("networking", "Office VPN endpoint",
     "The office VPN is WireGuard on vpn.northwind.example, UDP port 51820. Keys are issued by the IT desk."),
    ("networking", "DNS resolvers",
     "Internal DNS is served by two Unbound resolvers at 10.0.0.53 and 10.0.1.53."),
    ("networking", "TLS certificate renewal",
     "TLS certificates come from Let's Encrypt through cert-manager and renew 30 days before they expire."),
    ("networking", "Load balancer idle timeout",
     "The public load balancer closes idle connections after 350 seconds; websockets send a ping every 60 seconds."),
    ("networking", "Firewall change process",
     "Firewall rule changes need a ticket in the NETSEC queue and a review by Priya before they are applied."),
    ("networking", "MTU on the overlay network",
     "The Kubernetes overlay network uses an MTU of 1450 because of the VXLAN header."),
    ("kubernetes", "Cluster upgrade window",
     "Kubernetes cluster upgrades happen on the first Tuesday of the month between 06:00 and 08:00 UTC."),
    ("kubernetes", "Node pool machine type",
     "The default node pool uses n2-standard-8 machines; the GPU pool uses a2-highgpu-1g."),
    ("kubernetes", "Pod eviction on disk pressure",
     "Pods were evicted because node disks filled with container logs; log rotation now keeps 5 files of 50 MB."),
    ("kubernetes", "Liveness probe settings",
     "The API's liveness probe hits /healthz every 10 seconds and restarts the pod after 3 failures."),
    ("kubernetes", "Helm chart repository",
     "Our Helm charts live in the charts.northwind.example repository, published from the infra-charts git repo."),
    ("kubernetes", "Namespace per team",
     "Every team gets its own namespace named team-<name>, with a resource quota of 64 CPUs."),
    ("incidents", "Payment outage in March",
     "On 12 March payments failed for 47 minutes because the Stripe webhook secret had been rotated without "
     "updating the service. Fix: secrets now rotate through Vault."),
    ("incidents", "Search index corruption",
     "In June the search index was corrupted by a full disk on es-node-2; we rebuilt it from the database in 3 hours."),
    ("incidents", "Login latency spike",
     "Login latency rose to 4 seconds in August because bcrypt cost was raised to 14; it was set back to 12."),
    ("incidents", "Expired domain",
     "The status page went dark in May when the domain northwind-status.example expired; renewal is now automatic."),
    ("incidents", "Queue backlog after deploy",
     "A deploy in September doubled the RabbitMQ backlog to 2 million messages; the consumer prefetch was set back to 50."),
    ("incidents", "Certificate expiry on the API",
     "The API certificate expired in January because cert-manager lacked permission for the DNS challenge."),
    ("ci-cd", "Build cache",
     "CI builds use a shared Docker layer cache on the runner disk; a cold build takes 14 minutes, a warm one 3."),
    ("ci-cd", "Flaky test quarantine",
     "Flaky tests are tagged @quarantine and run in a separate nightly job instead of blocking merges."),
    ("ci-cd", "Release tagging",
     "Releases are tagged vYYYY.MM.N from the main branch; the deploy job starts when a tag is pushed."),
    ("ci-cd", "Runner fleet",
     "CI runs on 12 self-hosted GitHub Actions runners with 16 cores each, scaled down to 4 at night."),
    ("ci-cd", "Secrets in CI",
     "CI secrets come from Vault through OIDC; nobody stores long-lived tokens in the repository settings."),
    ("ci-cd", "Test coverage gate",
     "Merges are blocked when line coverage of the changed files drops below 80 percent."),
    ("people", "On-call rotation",
     "On-call rotates weekly on Mondays at 10:00; the schedule is in PagerDuty under 'platform-primary'."),
    ("people", "Database owner",
     "Marta Kowalski owns the database platform and approves schema migrations."),
    ("people", "Security contact",
     "Security reports go to Priya Raman, who leads the security team, or to security@northwind.example."),
    ("people", "Onboarding buddy",
     "New engineers get an onboarding buddy for their first six weeks; Tomás coordinates the buddies."),
    ("people", "Incident commander",
     "During a major incident the on-call engineer is incident commander until Jonas Berg takes over."),
    ("people", "Office location",
     "The engineering team sits on the fourth floor of the Lindholmen office in Gothenburg."),
]

# A stale fact, deleted later in the log: no answer may come from it.
STALE = ("databases", "Postgres primary host (old)",
         "The production Postgres primary runs on db-prod-1.internal, port 5432.")

# (question, title of the entry with the answer, a word the right answer contains)
QUESTIONS = [
    ("Which host runs the production Postgres primary?", "Postgres primary host", "db-prod-3"),
    ("What value did we set autovacuum_vacuum_cost_limit to?", "Postgres autovacuum tuning", "2000"),
    ("How many connections does each PgBouncer pool hold?", "Connection pool size", "40"),
    ("When do the nightly database backups run?", "Nightly backup schedule", "02:30"),
    ("How long are database backups kept?", "Nightly backup schedule", "35"),
    ("Which UDP port does the office VPN use?", "Office VPN endpoint", "51820"),
    ("What are the IP addresses of the internal DNS resolvers?", "DNS resolvers", "10.0.0.53"),
    ("After how many seconds does the load balancer close idle connections?", "Load balancer idle timeout", "350"),
    ("What MTU does the overlay network use?", "MTU on the overlay network", "1450"),
    ("When are Kubernetes cluster upgrades done?", "Cluster upgrade window", "Tuesday"),
    ("Why were pods evicted?", "Pod eviction on disk pressure", "log"),
    ("How often does the liveness probe check /healthz?", "Liveness probe settings", "10"),
    ("Why did payments fail in March?", "Payment outage in March", "webhook"),
    ("What caused the login latency spike?", "Login latency spike", "bcrypt"),
    ("Why did the status page go dark in May?", "Expired domain", "expired"),
    ("How long does a cold CI build take?", "Build cache", "14"),
    ("How are releases tagged?", "Release tagging", "vYYYY"),
    ("Who approves schema migrations?", "Database owner", "Marta"),
    ("Who leads the security team?", "Security contact", "Priya"),
    ("When does the on-call rotation change?", "On-call rotation", "Monday"),
    # not in the notes: the answer should be "I do not know" (and cite nothing)
    ("What is the Wi-Fi password of the Gothenburg office?", None, None),
    ("Which version of Redis do we run?", None, None),
    ("How much did the March outage cost in euros?", None, None),
    ("What is the name of the CEO's dog?", None, None),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_kb.py OUT-DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    titles = {t for _, t, _ in ENTRIES}
    assert len(titles) == len(ENTRIES), "titles must be unique"
    assert all(e is None or e in titles for _, e, _ in QUESTIONS), "a question names no entry"
    lines, off, stale_off = [], 0, None
    for i, (topic, title, text) in enumerate(ENTRIES):
        if i == 3:   # the stale fact sits among the others, then is deleted at the end
            stale_off = off
            line = json.dumps({"topic": STALE[0], "title": STALE[1], "text": STALE[2]}) + "\n"
            lines.append(line)
            off += len(line.encode())
        line = json.dumps({"topic": topic, "title": title, "text": text,
                           "ts": "2026-%02d-%02dT09:00:00Z" % (1 + i % 11, 1 + i % 27)}) + "\n"
        lines.append(line)
        off += len(line.encode())
    lines.append(json.dumps({"delete": stale_off}) + "\n")
    tmp = os.path.join(out, "data.log.tmp")
    with open(tmp, "w") as f:
        f.write("".join(lines))
    os.replace(tmp, os.path.join(out, "data.log"))
    with open(os.path.join(out, "questions.jsonl"), "w") as f:
        for q, e, a in QUESTIONS:
            f.write(json.dumps({"q": q, "entry": e, "answer": a}) + "\n")


if __name__ == "__main__":
    main()
