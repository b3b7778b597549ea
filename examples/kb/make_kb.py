#!/usr/bin/env python3
"""Writes examples/kb/data.log and bench/kb_labels.json: the sample knowledge base.

The notes below are one person's knowledge base, an engineer who also keeps
notes about the house, the kitchen, the garden, books, trips and money. Each
line is `Title :: text` under an `@topic` heading, optionally prefixed by
labels that say what a reader of the KB should find:

  [d:NAME]   near-duplicates: entries with the same NAME say the same thing
             (written twice, months apart, in other words: the tap/faucet pair);
  [l:NAME]   cross-topic links: entries with the same NAME in different topics
             are about the same thing (an incident and its database fix);
  [m:TOPIC]  misfiled: the note belongs to its heading's topic but was filed
             under TOPIC.

The labels go to bench/kb_labels.json (by title) for bench/kb_calibrate.py and
tests/kb_one_shot.sh; they never reach data.log. Entries are written in a fixed
shuffled order with timestamps two days apart, then a retracted entry, its
{"delete": offset} line, and a line a crashed writer left half-written.

Deterministic:  python3 examples/kb/make_kb.py          (writes both files)
                python3 examples/kb/make_kb.py --check  (exit 1 if either is stale)
"""
import datetime
import json
import os
import random
import re
import sys

NOTES = """
@incidents
[l:pool] Checkout outage: Postgres connection pool exhausted :: Checkout returned 500s for 40 minutes during the Friday sale. Every app pod opened its own 50 connections and Postgres hit max_connections at 200, so new requests queued until they timed out. Mitigated by scaling the app down, fixed for good with PgBouncer.
[l:lbidle] API 502s after the load balancer idle timeout change :: Someone lowered the load balancer idle timeout to 30 s while our upstream keepalive was 60 s, so the balancer reused connections the backend had already closed and clients got sporadic 502s. Set the backend keepalive below the balancer timeout.
[l:nodedisk] Logging node disk full stopped ingestion :: The log shipper node ran out of disk at 3 am, the kubelet evicted the ingestion pods and we lost two hours of application logs. Nobody was paged because the disk alert only covered the database hosts.
[d:cert] [l:cert] Certificate expired on api.example.com at midnight :: The public API certificate expired at 00:00 UTC. The renewal job had been failing for three weeks on a DNS permission error and nobody looked at its logs. Clients got handshake failures for 50 minutes until I renewed it by hand.
Pager storm from a flapping disk alert :: One disk usage alert oscillated around its 80 percent threshold and paged the on-call 140 times in a night. Added a 15 minute for-duration and hysteresis; alerts that flap are worse than no alert.
[l:dns] DNS outage after the zone change :: After we moved the internal zone, resolvers kept a negative answer cached for an hour because the SOA minimum TTL was 3600. Lesson: lower TTLs a day before any DNS migration, including the negative cache TTL.
[l:migration] Deploy rolled back: migration locked the orders table :: A migration added a NOT NULL column with a default on the 80 million row orders table and held an exclusive lock for eleven minutes; checkout timed out and we rolled the deploy back.
[l:cron] Nightly invoice job ran twice after the DST change :: On the night clocks went back, the invoice cron fired twice because the node ran in local time, and 312 customers got duplicate invoices. Servers now run in UTC and the job takes a lock.
Memory leak in the image resizer :: The thumbnail service grew by 200 MB an hour until it was OOM killed every afternoon. A heap profile showed the decoded image cache had no size bound; capped it at 256 entries.
[l:queue] Queue backlog after a poison message :: One malformed order event crashed the consumer on every retry, so the queue backed up to 2 million messages. Added a dead-letter queue after five attempts and an alert on consumer restarts.
S3 bucket public for twenty minutes :: A Terraform change replaced the bucket policy and the exports bucket was world-readable for twenty minutes. Nothing was downloaded according to the access logs. Now Block Public Access is on at the account level.
Rate limiter blocked our own health checks :: The new rate limiter counted the load balancer health checks as one client and started returning 429 to them, so the balancer marked every backend unhealthy. Health check paths are now exempt.
Postmortem template we actually use :: Summary, impact in numbers, timeline in UTC, what went well, where we got lucky, contributing factors (never a single root cause), action items with owners and dates. Keep it under two pages.
[l:checklist] On-call handover checklist :: Open incidents and their state, alerts silenced and until when, deploys in flight, anything flaky this week, and who to call for the database. Takes five minutes and saves the first page of the next shift.
[d:retry] [l:retry] Retry storm took down the auth service :: When auth slowed down, every client retried immediately three times, which quadrupled the load and kept auth down for 25 minutes. Added exponential backoff with jitter and a retry budget per client.
Clock skew broke JWT validation :: One node's NTP daemon had died and its clock drifted 4 minutes ahead, so tokens it issued were rejected as not yet valid elsewhere. Added a clock offset alert and 60 s leeway in validation.
[l:redis] Redis eviction dropped user sessions :: Sessions and cache shared one Redis with allkeys-lru, so a cache warmup evicted thousands of sessions and logged users out. Sessions moved to their own instance with noeviction.
[l:restore] Backup restore drill took six hours :: The quarterly restore drill took six hours instead of the one hour our recovery objective promises, mostly copying the base backup over a slow link. We now keep a recent copy in the same region.
[l:queue] Kafka consumer lag during the sale :: The recommendations consumer fell 40 minutes behind during the sale because it processed one message at a time. Batching 500 messages per poll brought lag under a minute.
Feature flag shipped to everyone :: A flag meant for internal users defaulted to on when the flag service was unreachable, so the unfinished checkout page went to all customers. Flags now default to off on error.
Status page forgot to update :: During the outage the status page still said all systems operational for 30 minutes because updating it was nobody's job. The incident commander now owns it from the first minute.
Log volume doubled after a debug flag :: Someone left debug logging on in the payments service after an investigation and log ingestion doubled for a week. Debug logging now expires automatically after four hours.
Outage from an expired domain registration :: The status page domain expired because the renewal card on the registrar account had been cancelled. Turned on auto-renew with two payment methods and a calendar reminder a month before.
Payments webhook signature failures :: The payment provider rotated its signing secret and our webhook handler only knew the old one, so 2 percent of payment confirmations were rejected for an hour. The handler now accepts both secrets during rotation.
Severity levels: SEV1 versus SEV2 :: SEV1 when customers cannot pay or log in, or data is at risk; SEV2 when a feature is degraded with a workaround; SEV3 for internal only. Declare high and downgrade later, never the other way round.
[l:dekker] Blameless review meeting: what worked :: The review of the checkout outage worked because we asked how the decision made sense at the time rather than who made it. People described the dashboards they had been looking at, which showed us the missing signal.
[l:slot] Primary database disk full from an abandoned replication slot :: The primary's disk filled with WAL because a replication slot for a decommissioned replica was never dropped. Writes stopped for 15 minutes. Now we alert on slot lag in bytes.
[d:retry] Retry storm against auth after token expiry :: All mobile clients refreshed expired tokens at the same moment and retried instantly on failure, so the auth service drowned under its own retries. Fixed with jittered backoff and a cap on retries per client.
[d:cert] [l:cert] TLS cert on the public API lapsed overnight :: Our API's TLS certificate ran out during the night because automated renewal had quietly broken weeks earlier; customers saw certificate errors until a manual renewal about an hour later.
@databases
[l:pool] PgBouncer in transaction mode fixed connection exhaustion :: Put PgBouncer in front of Postgres in transaction pooling mode with a pool of 40 server connections; app pods can open as many client connections as they like. Prepared statements must be off on the client side.
[l:migration] Adding a column with a default locks the table :: On our old Postgres version, ALTER TABLE ADD COLUMN with a default rewrote the whole table under an exclusive lock. Add the column nullable, backfill in batches, then set the default and the constraint.
[d:vacuum] Autovacuum falling behind on the orders table :: Dead tuples on orders grew to 40 percent of the table because autovacuum was throttled by the default cost limit. Raised autovacuum_vacuum_cost_limit to 2000 and lowered the scale factor for that table to 0.02.
[d:report] Index on created_at for the monthly report :: The monthly revenue report scanned the whole orders table. An index on orders(created_at) made it an index range scan and the report went from 4 minutes to 3 seconds.
EXPLAIN ANALYZE: compare actual rows with the estimate :: When a plan is bad, compare estimated and actual row counts node by node; the first node where they differ by 100x is where the planner went wrong. Usually stale statistics, so run ANALYZE first.
[l:ddia] Replica lag during a big reindex :: Rebuilding the events index on the primary made the replicas fall 10 minutes behind and read traffic served stale data. Rebuild concurrently, off peak, and watch replay lag.
CREATE INDEX CONCURRENTLY caveats :: It cannot run inside a transaction, takes two table scans, and if it fails it leaves an INVALID index behind that must be dropped by hand. Check pg_index.indisvalid afterwards.
[l:restore] Testing pg_basebackup restores :: A backup is only a backup once restored. Monthly: restore the latest base backup plus WAL to a scratch host, run the row count checks, and record how long it took.
Deadlock between two updates in different order :: Two code paths updated accounts and balances in opposite order and deadlocked under load. Always lock rows in a fixed order, by primary key.
Partitioning the events table by month :: Events grew to 2 billion rows; range partitions by month made dropping old data a DROP TABLE instead of a DELETE that bloated everything. Keep the partition key in every query.
SQLite WAL mode for the home automation log :: The home sensor logger kept hitting database is locked. journal_mode=WAL and a busy_timeout of 5 seconds fixed it; readers no longer block the writer.
Always set statement_timeout :: Every application role gets statement_timeout of 30 s and idle_in_transaction_session_timeout of 60 s, so one runaway query or a forgotten transaction cannot hold locks for hours.
N+1 queries in the ORM :: The orders page issued 300 queries, one per line item. Eager loading the relation turned it into two queries and the page from 1.8 s into 120 ms.
UUID or bigint primary keys :: Random UUIDv4 keys scatter inserts across the whole index and blow up the cache; bigint identity or UUIDv7 keeps inserts at the right edge. We use bigint internally and a public UUID column.
pg_stat_statements finds the slowest queries :: Sort pg_stat_statements by total_exec_time, not mean time: the query that runs 2 million times at 5 ms costs more than the monthly report.
VACUUM FULL versus pg_repack :: VACUUM FULL takes an exclusive lock for the whole rewrite; pg_repack rebuilds the table online with only a short lock at the end. Needs a primary key and twice the disk space.
[l:redis] Redis as a cache, not a database :: If losing Redis loses data we cannot rebuild, it is a database and needs persistence, replicas and backups. Keep it a cache and make every key rebuildable.
Migrating MySQL utf8 to utf8mb4 :: MySQL's utf8 is three bytes and silently rejected emoji in customer names. Converted to utf8mb4; indexes on VARCHAR(255) hit the key length limit and had to shrink to 191.
Upgrading Postgres 14 to 16 with pg_upgrade :: pg_upgrade --link took 40 seconds on a 900 GB cluster. Run ANALYZE afterwards because statistics are not carried over, and keep the old binaries until the new cluster is verified.
Foreign keys without indexes slow down deletes :: Deleting a customer took 9 seconds because the orders.customer_id foreign key had no index, so every delete scanned orders. Index every referencing column.
SKIP LOCKED makes a simple job queue :: SELECT ... FOR UPDATE SKIP LOCKED LIMIT 10 lets many workers pull jobs from one table without blocking each other. Good enough until a few thousand jobs a second.
Store timestamptz, display local time :: Store timestamps as timestamptz in UTC and convert to the user's zone only for display. The timestamp without time zone columns caused the DST bugs last year.
JSONB and GIN indexes :: A GIN index on a JSONB column only helps containment queries (@>). For filters on one key, an expression index on (data->>'status') is smaller and faster.
Checkpoint tuning for write-heavy load :: Checkpoints every 5 minutes caused I/O spikes. max_wal_size to 16 GB and checkpoint_completion_target 0.9 spread the writes out.
[l:ddia] Read replicas and read-your-writes :: After a user saves a form, reading from a lagging replica shows the old value. Route reads to the primary for a few seconds after a write from the same session.
[l:slot] Drop abandoned replication slots :: An inactive replication slot makes the primary keep all WAL forever. Check pg_replication_slots for inactive slots and alert when retained WAL passes 50 GB.
[d:report] Monthly report slow: missing index on orders.created_at :: The finance report took minutes every month because it read every row of orders to pick one month. Adding a btree index on the created_at column fixed it; it now runs in seconds.
[d:vacuum] Dead tuples piling up: autovacuum too throttled :: The orders table kept bloating because autovacuum could not keep pace with the updates. With a higher cost limit and a per-table scale factor of 0.02 the dead rows stay low.
[d:report] Revenue report query needs the created_at index :: The revenue report query is slow again on the new reporting database because the orders(created_at) index was not recreated there. Same fix as before: create the index, the report drops from minutes to seconds.
Connection string checklist :: sslmode=verify-full, application_name set per service, connect_timeout 5, target_session_attrs=read-write for the primary. application_name makes pg_stat_activity readable.
Logical replication for the zero-downtime move :: Moved the analytics database to the new host with logical replication: initial copy over a weekend, then cut over in 30 seconds. Sequences are not replicated, so set them by hand before the switch.
[m:garden] Rebuild the bloated events index :: The events_created_at index was four times the size of a fresh one after months of updates. REINDEX CONCURRENTLY rebuilt it in 20 minutes without blocking writes, and the query on recent events got twice as fast.
@infra
[d:probe] Liveness probe killed slow-starting Java pods :: The billing service needs about 90 seconds to warm up but its liveness probe started after 10 seconds, so Kubernetes killed it into CrashLoopBackOff. Added a startupProbe with a 180 second budget.
[l:nodedisk] Node disk pressure from container logs :: Container logs on the logging node pool filled the node disk and the kubelet began evicting pods. Log rotation at 100 MB per container and an alert at 75 percent disk keep it under control.
Docker build cache: copy the lockfile first :: The Dockerfile copied the whole repository before npm ci, so every commit invalidated the dependency layer and builds took 14 minutes. Copying package-lock.json first and installing brings it to 3 minutes.
Terraform state lock stuck after a crashed apply :: An apply was killed mid-run and left the DynamoDB state lock behind. terraform force-unlock with the lock id fixed it, after checking nobody else was applying.
CPU limits cause throttling :: The API had a CPU limit of 1 core and was throttled during GC pauses even though the node was idle. Removed CPU limits, kept requests; memory limits stay.
Helm values per environment :: One values.yaml with defaults and a small values-staging.yaml and values-prod.yaml on top. Never branch the chart itself per environment.
[d:flaky] Flaky payments integration test in the merge queue :: The payments integration test fails about one run in twenty because it compares against the wall clock; the merge queue retries hid it for months. Injected a fake clock and the flake is gone.
Spot instances for CI runners :: CI runners moved to spot instances with a fallback to on-demand; jobs are retried when a node is reclaimed. The runner bill dropped by 65 percent.
Rotated the leaked staging API key :: A staging API key was pushed to a public repository. Revoked it, rotated everything in that vault path and added a secret scanner to the pre-commit hooks and CI.
[l:cert] cert-manager renewal failing on DNS-01 :: cert-manager could not renew the API certificate because its service account lost permission to write TXT records in the DNS zone after an IAM cleanup. The Certificate resource showed the error for weeks.
[l:cron] CronJob concurrencyPolicy Forbid :: Kubernetes CronJobs default to allowing concurrent runs; set concurrencyPolicy: Forbid and startingDeadlineSeconds so a slow or doubled run does not overlap the next. Schedules are in UTC.
[l:queue] Autoscaling consumers on queue length :: CPU-based autoscaling never scaled the order consumers because they wait on I/O. KEDA scaling on queue depth, one replica per 1000 messages, keeps the backlog short.
Pod disruption budgets for node upgrades :: Node upgrades drained all three replicas of the search service at once. A PodDisruptionBudget with minAvailable 2 makes the drain wait.
Secrets in environment variables leak into crash reports :: The crash reporter attached the full environment, including database passwords. Secrets now come from mounted files and the reporter scrubs anything named like a key.
GitHub Actions cache keys :: Key the cache on the hash of the lockfile and the runner OS, with a restore key prefix so a partial hit still helps. Caches over 10 GB get evicted.
[l:cert] Alert on certificate expiry :: Added a Prometheus alert on probe_ssl_earliest_cert_expiry that fires 21 days before any certificate expires, for every public endpoint. Renewal jobs can fail silently; the alert cannot.
Canary deploys at 5 percent :: New versions take 5 percent of traffic for 30 minutes and are promoted only if error rate and p99 latency stay within 10 percent of the stable version.
Never deploy the latest tag :: Images are tagged with the git commit and deployments reference the digest. The latest tag made a rollback redeploy the broken image.
OOMKilled: JVM heap versus container memory :: The container limit was 2 GB and the heap max 2 GB, so metaspace and thread stacks pushed it over and the kernel killed it. Heap is now 70 percent of the limit via MaxRAMPercentage.
Namespace resource quotas per team :: Each team namespace has a ResourceQuota and a LimitRange with default requests, so one team's runaway job cannot starve the cluster.
[l:migration] Expand and contract schema migrations :: For zero-downtime deploys the schema must work with the old and the new code: add new columns first, deploy code that writes both, backfill, switch reads, then drop the old column in a later release.
Log retention: 14 days hot, 90 days cold :: Application logs stay searchable for 14 days, then move to object storage for 90 days. Audit logs are kept a year.
ccache on CI for the C++ build :: Caching the ccache directory between CI runs cut the C++ build from 22 minutes to 6. Key the cache by compiler version.
Systemd timers on the home server :: Replaced cron on the home server with systemd timers: logs land in the journal, Persistent=true catches up runs missed while the machine was off, and failures show in systemctl.
Idle GPU nodes over the weekend :: The training node pool stayed up with no jobs over weekends; scaling it to zero from Friday night to Monday morning saves about a fifth of the monthly compute bill.
[d:probe] startupProbe for the slow JVM service :: Our Java billing service takes a minute and a half to start, and the liveness check began after ten seconds and kept restarting it. A startup probe with a three minute allowance stopped the crash loop.
[d:flaky] Payments test fails one run in twenty :: The integration test for payments was flaky in the merge queue because it depended on the current time; retries masked it. Replacing the real clock with a fake one fixed it.
Backups of the home server with restic :: restic to a USB disk nightly and to a cloud bucket weekly, with a monthly restore test of one folder. Retention: 7 daily, 4 weekly, 12 monthly.
@networking
[l:lbidle] Load balancer idle timeout drops websockets :: The cloud load balancer closes idle connections after 60 seconds, so the live dashboard's websocket died every minute. A 30 second ping from the client keeps it open.
[d:mtu] MTU mismatch over the VPN :: Large responses hung over the site-to-site VPN while small ones worked: the tunnel MTU was 1420 and path MTU discovery was blocked by a firewall dropping ICMP. Clamped TCP MSS on the tunnel.
[l:dns] Lower DNS TTLs before a migration :: A day before moving a service, drop the record TTL to 60 s and check the SOA minimum, which sets how long negative answers are cached. Raise it again a week after.
[l:ethernet] Mesh Wi-Fi node placement at home :: The mesh satellite in the office had one bar of backhaul and halved throughput. Moved it to the hallway halfway between, and the office gets 300 Mbit/s. A wired backhaul would be better.
TCP keepalive versus application heartbeats :: Kernel TCP keepalive defaults to two hours before the first probe, useless behind NAT. Use an application-level heartbeat every 30 s or tune tcp_keepalive_time per socket.
tcpdump on one port :: tcpdump -i any -nn port 5432 -w pg.pcap, then open it in Wireshark. -s 0 for full packets; filter host to avoid capturing the SSH session itself.
IPv6 on the home router :: Enabled IPv6 with prefix delegation from the ISP; the firewall had to allow ICMPv6 or path MTU discovery breaks. Devices get stable privacy addresses.
Pi-hole as the home DNS :: Pi-hole on the home server answers DNS for the LAN and blocks ad domains. The router hands it out by DHCP with the router itself as a fallback in case the server is down.
Traceroute loss at one hop is not real loss :: A router in the middle showing 60 percent loss while later hops show none is just rate-limiting its ICMP replies. Only loss that continues to the destination matters.
TLS 1.3 and the old Java client :: A partner's Java 8 client failed the handshake after we disabled TLS 1.2. Kept 1.2 with modern ciphers on that endpoint until they upgrade.
Split-horizon DNS for internal services :: Internal clients resolve api.example.com to the private load balancer, external ones to the public one. Two zones with the same name; check both when changing records.
HTTP/2 head-of-line blocking on lossy links :: On the flaky office uplink, one lost packet stalled every stream of the HTTP/2 connection. HTTP/3 over QUIC does not have this problem.
Port exhaustion on the NAT gateway :: Thousands of short-lived connections to one API exhausted the NAT gateway's source ports and new connections failed. Connection reuse with keepalive fixed it.
curl timing breakdown :: curl -w with time_namelookup, time_connect, time_appconnect, time_starttransfer shows whether DNS, TCP, TLS or the server is slow.
Reverse proxy buffering broke server-sent events :: nginx buffered the event stream and clients saw updates in bursts. proxy_buffering off for that location, or the X-Accel-Buffering: no header.
VLAN for IoT devices at home :: Smart plugs and the TV live on their own VLAN with no access to the LAN except the home automation server on one port.
mTLS between internal services :: Service-to-service calls use mutual TLS with certificates from the internal CA, rotated every 24 hours by the mesh sidecar.
SSH ProxyJump through the bastion :: ProxyJump bastion in ~/.ssh/config for the private hosts; no agent forwarding, which would let the bastion use my keys.
[l:retry] 429 handling and Retry-After :: Clients must honour Retry-After on 429 and 503; our SDK retried instantly and made the rate limiting worse.
[d:wifi] Wi-Fi channel congestion in the apartment :: Evenings the 2.4 GHz network crawled; a Wi-Fi analyzer showed 19 neighbours on channel 6. Moved devices to 5 GHz on a DFS channel and speeds tripled.
[l:cert] Let's Encrypt DNS-01 for wildcard certificates :: Wildcard certificates need the DNS-01 challenge: the ACME client writes a TXT record under _acme-challenge. Give it an API token limited to that record, and monitor renewal failures.
Keepalived failover for the home lab :: Two Raspberry Pis share a virtual IP with keepalived VRRP; when the primary dies the backup takes over the address in about 3 seconds.
[d:mtu] Large packets vanish over WireGuard :: Through the WireGuard tunnel SSH worked but git clone stalled; big packets were silently dropped because ICMP fragmentation-needed was filtered. Lowering the interface MTU to 1380 solved it.
[d:wifi] Slow Wi-Fi every evening :: Internet felt slow after 7 pm. Turned out to be our own 2.4 GHz network sharing channel 6 with every neighbour in the building; switching to 5 GHz fixed it.
Anycast DNS basics :: The same resolver IP is announced from many locations and BGP routes each client to the nearest one; a failed site is withdrawn and traffic moves within seconds.
@home-repair
[d:tap] Dripping kitchen tap: replaced the cartridge :: The kitchen tap dripped even when closed hard. Turned off the water under the sink, pulled the handle, and swapped the ceramic cartridge for an identical one from the hardware store. Took 20 minutes, no more drip.
Bleeding the radiators before winter :: Upstairs radiators were cold at the top. Bled each one with the key, starting at the one nearest the boiler, until water came out, then topped the boiler pressure back up to 1.5 bar.
[l:ethernet] Running ethernet through the wall to the office :: Drilled through the wall behind the desk and ran a Cat6 cable from the router to the office along the skirting board. Wired backhaul for the mesh satellite and a proper connection for the work laptop.
Running toilet: replaced the flapper :: The downstairs toilet kept refilling every few minutes. The rubber flapper at the bottom of the cistern had warped; a new one fixed the hiss and the water bill.
Patching a hole in drywall :: Fist-sized hole from the door handle: cut a square, screwed a batten behind it, fitted a drywall patch, two coats of filler, sanded and painted. Mesh tape on the seams.
Resealing the shower with silicone :: Cut out the old black silicone, cleaned with isopropyl alcohol, let it dry overnight, ran a new bead of sanitary silicone and smoothed it with a wet finger. No water for 24 hours.
[l:dehum] Basement dehumidifier settings :: The basement sat at 75 percent humidity and smelled musty. The dehumidifier at 55 percent runs about 8 hours a day in summer and empties into the floor drain with a hose.
Smoke alarm chirping :: A chirp every 40 seconds means a low battery; a ten-year sealed alarm that chirps after the test means end of life. Replaced the hallway one, dated 2014.
[l:rain] Gutter cleaning and downspout extension :: Cleaned the gutters in November, two buckets of leaves. Added a downspout extension so the water lands a metre from the foundation instead of next to the basement wall.
Sticking door: planing the bottom edge :: The bathroom door stuck on the new tiles. Took it off its hinges, planed 3 mm off the bottom edge and sealed the bare wood so it does not swell.
[d:boiler] [l:boiler] Boiler pressure drops every week :: The boiler loses pressure from 1.5 to 0.5 bar about once a week. No visible leaks at the radiators; the plumber suspects the expansion vessel needs recharging.
Replacing a light switch safely :: Switched off the circuit at the breaker and confirmed dead with a voltage tester before touching anything. Photographed the wiring before disconnecting the old switch.
Squeaky floorboards :: Found the joists with a magnet, drove two screws through the board into the joist, and the squeak stopped. Under carpet, special snap-off screws go through it.
Repainting the window frames :: Sanded back to sound wood, spot-primed the bare patches, two coats of exterior gloss. Paint only in dry weather above 10 degrees.
Mold behind the wardrobe :: Black mold on the outside wall behind the bedroom wardrobe. Cleaned it, moved the wardrobe 5 cm off the wall for air flow, and keep the window open a crack at night.
[l:roof] Roof replacement quotes :: Three quotes for re-roofing: 14,500, 16,200 and 19,800. The middle one includes new battens and a 15 year guarantee. Roofer says the current roof has two winters left.
GFCI outlet keeps tripping in the bathroom :: The bathroom outlet tripped whenever the hair dryer ran. Replaced the 15 year old GFCI outlet; it had become oversensitive. Test button monthly.
Washing machine drain filter :: The washer stopped mid-cycle with an error. The drain filter behind the little door at the bottom front was full of lint and a coin. Put a towel down first, a lot of water comes out.
Caulking the bathtub :: Fill the tub with water before caulking so the gap opens to its widest; the bead then does not crack when someone gets in.
Garage door remote reprogramming :: Press the learn button on the motor unit, then the remote button within 30 seconds. The light flashes when it took.
Cleaning tile grout :: Baking soda paste and a stiff brush for the kitchen grout, then a penetrating sealer once dry. Oxygen bleach for the shower grout.
[l:fence] Fence posts rotting at the base :: Two fence posts on the garden side rotted through at ground level after six years in concrete. Replaced them with posts on metal spikes so the wood never sits in wet soil.
Insulating the attic hatch :: Cold air poured out of the attic hatch. Glued 100 mm of rigid foam to the top of the hatch and put draught strip around the frame.
Water heater anode rod :: Checked the anode rod of the water heater after 5 years: more than half gone. Replaced it with a magnesium one; next check in three years.
Bike brake pads :: Front brake squealed and barely stopped. Pads were worn to the metal; new ones, toed in slightly, and cleaned the rim with alcohol.
[d:tap] Leaky faucet in the kitchen fixed with a new valve cartridge :: Our kitchen faucet would not stop leaking. I shut the supply valves, took the lever off and replaced the valve cartridge with the same model. Twenty minute job and the leak is gone.
[d:boiler] Boiler keeps losing pressure :: Boiler pressure falls from 1.5 bar to almost nothing within a week, no drips anywhere in the house. Plumber thinks the expansion vessel has lost its air charge.
[m:reading] Reset the dishwasher breaker :: The dishwasher died mid-cycle. Its breaker in the consumer unit had tripped; reset it, and it tripped again when the heating element came on, so the element is probably shorting to earth.
[d:tap] Kitchen tap drips: new cartridge :: Drip from the kitchen mixer tap again, this time the hot side. Water off under the sink, handle off, old ceramic cartridge out, new one in. Fixed in a quarter of an hour.
@cooking
[l:sourdough] Sourdough starter feeding schedule :: Feed the starter 1:5:5 (starter, flour, water) twice a day at room temperature; it peaks after about 6 hours. Keep it in the fridge between bakes and feed twice before using.
Roast potatoes: parboil and rough them up :: Parboil 8 minutes in salted water, drain, shake in the pot to rough the edges, then roast in very hot fat at 220 degrees for about an hour, turning once.
Tomato sauce that does not split :: Simmer tinned tomatoes slowly with olive oil, garlic and salt for 40 minutes, then stir cold butter in off the heat so the sauce stays glossy.
Risotto ratio :: One part rice to about three and a half parts hot stock, added a ladle at a time. Finish off the heat with butter and parmesan and let it rest two minutes.
Salting pasta water :: About 10 grams of salt per litre. Keep a cup of the starchy water to loosen the sauce.
Chili for twelve people :: 2 kg minced beef, 4 onions, 3 tins of tomatoes, 3 tins of beans, chipotle, cumin, a square of dark chocolate. Three hours on low; better the next day.
[l:blight] Green tomato chutney :: With 3 kg of green tomatoes from the garden: onions, apples, brown sugar, cider vinegar, mustard seeds. Cook down for two hours until thick, jar hot. Needs a month before eating.
[d:pizza] Pizza dough: 65 percent hydration, 48 hour cold ferment :: 1 kg flour, 650 g water, 25 g salt, 2 g dried yeast. Mix, rest, fold twice, then 48 hours in the fridge in balls. Bake on the steel at the oven's maximum.
Rice: rinse and 1 to 1.2 water :: Rinse basmati until the water runs clear, then 1 cup rice to 1.2 cups water, lid on, lowest heat 12 minutes, rest 10 minutes off the heat.
Pancakes the kids like :: 250 g flour, 2 eggs, 300 ml milk, a spoon of sugar, a pinch of salt, melted butter. Rest the batter 20 minutes.
Braised short ribs :: Brown the ribs hard, then onions, carrots, tomato paste, red wine and stock; covered in the oven at 150 degrees for three hours. Chill overnight and lift off the fat.
Seasoning the cast iron pan :: Thin layer of flaxseed oil, wipe almost all of it off, upside down in the oven at 250 degrees for an hour. Four rounds for a new pan.
Knife sharpening angle :: The Japanese knives at 15 degrees per side, the German ones at 20. Whetstone 1000 then 6000 grit; strop on newspaper.
Chicken stock from the roast carcass :: Carcass, onion, carrot, celery, bay leaf, cold water to cover; simmer three hours without boiling, strain, chill. Freeze in 500 ml tubs.
Thai green curry paste from scratch :: Green chillies, lemongrass, galangal, garlic, shallots, coriander roots, shrimp paste, lime zest, roasted cumin and coriander seeds, pounded in the mortar.
Sunday meal prep :: Cook a big pot of grains, roast two trays of vegetables, one protein, two sauces. Lunches for four days, dinners mix and match.
Fermented hot sauce :: Chillies and garlic in a 3 percent brine for two weeks, then blended with a splash of vinegar. Keep an airlock on the jar; white film is kahm yeast, skim it off.
Homemade yogurt in the oven :: Heat milk to 85 degrees, cool to 43, stir in two spoons of yogurt, and leave it in the oven with only the light on for 8 hours.
[l:basil] Pesto from too much basil :: Basil, toasted pine nuts, garlic, parmesan, olive oil. Blanch the basil for 5 seconds to keep it green. Freeze in ice cube trays without the cheese.
Reverse-seared steak :: Thick ribeye in a 120 degree oven until 50 degrees inside, then a minute per side in a smoking pan. Salt it the night before.
Dal tadka :: Yellow lentils simmered with turmeric until soft; tadka of ghee, cumin seeds, garlic, dried chilli and asafoetida poured over at the end.
Freezing cooked rice safely :: Cool cooked rice within an hour, spread on a tray, freeze in portions. Reheat once only, until steaming hot.
[l:zucchini] Zucchini fritters :: Grate 2 zucchini, salt and squeeze out the water, then egg, flour, feta and dill. Fry spoonfuls in olive oil. Good use of the garden glut.
Lemon curd :: 4 eggs, 200 g sugar, juice and zest of 4 lemons, 100 g butter, stirred over a water bath until it coats the spoon. Keeps two weeks in the fridge.
[l:camp] One-pot meals for the camping trip :: Couscous with dried vegetables and a stock cube, instant noodles with peanut butter, porridge with dried fruit. One pot and one stove; pre-measure everything at home.
Moka pot grind size :: Grind slightly coarser than espresso, fill the basket without tamping, water to below the valve, medium heat, take it off as soon as it gurgles.
[d:pizza] Pizza dough I liked: two days in the fridge :: The best pizza so far: a dough with 65 percent water, a little yeast, proofed in the fridge for two days in individual balls, baked as hot as the oven goes on the steel.
[m:databases] Banana bread with brown butter :: Brown the butter until it smells nutty, cool it, then the usual recipe with very ripe bananas. 55 minutes at 175 degrees.
@garden
[l:blight] Late blight on the tomatoes :: Brown patches on the tomato leaves and stems after the wet week in August: late blight. Pulled the worst plants, picked every green tomato, and will rotate the bed next year.
[l:basil] Basil bolting in July :: The basil flowered in the July heat and the leaves turned bitter. Pinch out the flower tips every week and sow a second batch in June.
[d:compost] Compost too wet and smelly :: The compost bin turned slimy and smelled of ammonia: too many grass clippings. Mixed in shredded cardboard and dry leaves and turned it; it smelled of earth again within two weeks.
Raised bed soil mix :: Filled the new raised beds with 60 percent topsoil, 30 percent compost and 10 percent grit. Top up with 5 cm of compost every spring.
Watering during the heatwave :: Water deeply at 6 am twice a week rather than a little every evening; the roots go deeper. Tomatoes and beans first, the lawn can go brown.
Slugs on the lettuce :: Slugs ate the lettuce seedlings overnight. Beer traps and a collar of copper tape on the raised bed; going out with a torch at 10 pm works best.
Pruning the apple tree in February :: Winter pruning while dormant: remove dead and crossing branches, open the centre into a goblet shape, never take more than a quarter of the canopy in a year.
Drip irrigation timer :: A battery timer on the outside tap runs the drip line for 20 minutes at 6 am. Check the filter monthly; it clogs with sand.
Planting garlic in October :: Individual cloves pointy end up, 15 cm apart, 5 cm deep, in October. Harvest in July when the lower leaves turn yellow.
Overseeding bare patches of lawn :: Scarify the bare patches, spread a thin layer of topsoil, sow at 35 g per square metre in September, keep it moist for three weeks.
Aphids on the roses :: Green aphids on every rose bud. A strong jet of water every other day and the ladybirds did the rest; no spray needed.
Seed starting under LED lights :: Tomatoes and peppers sown in March under a cheap LED panel 10 cm above the trays, 16 hours a day. Without it the seedlings go leggy.
Dividing the rhubarb :: The rhubarb crown was getting woody. Dug it up in November, split it with a spade into three pieces, each with a bud, and replanted with plenty of manure.
Strawberry runners :: Pin the runners into small pots in July, cut them from the mother plant after they root, and replace a third of the plants each year.
[l:rain] Rain barrel overflow :: The rain barrel filled in one storm and overflowed against the shed. Added an overflow hose back into the downspout and a second barrel linked at the bottom.
[l:fence] Fence posts by the vegetable bed rotted :: The posts of the fence along the vegetable bed snapped at soil level after six years; the concrete held water against the wood. New posts stand on metal spike supports.
Powdery mildew on the cucumbers :: White powder on the cucumber leaves in late summer. Water the soil not the leaves, space plants more, and a milk spray (1 part milk to 9 water) slowed it down.
Hedge trimming and nesting season :: Do not cut the hedge between March and August because of nesting birds; trim it in September.
Potatoes in grow bags :: Three seed potatoes per 40 litre bag, cover with compost as the shoots grow. 2 kg per bag, no digging.
[l:zucchini] Too many zucchini :: Two zucchini plants produce more than four people can eat. Next year one plant, and pick them at 15 cm before they become marrows.
Mulching the beds :: 5 cm of wood chip on the paths and compost on the beds in autumn keeps weeds down and the soil moist through summer.
Soil pH test :: The kit says pH 6.5 for the vegetable beds, fine for most things; the blueberries need 5 so they live in pots with ericaceous compost.
Frost dates :: Last frost here is around mid May; tomatoes, beans and squash go out after the 15th. Fleece ready for late cold nights.
Lavender for the bees :: The lavender hedge is covered in bees all of July. Cut it back by a third after flowering, never into old wood.
[d:compost] Compost pile smells: add browns :: The compost heap got wet and smelly from too much fresh grass. The fix is carbon: torn cardboard and autumn leaves mixed in, then turning it. A couple of weeks later it smelled fine.
Sweet peas on the trellis :: Sow sweet peas in October in root trainers, plant out in April, and keep picking the flowers or they stop.
@reading
[l:sourdough] Flour Water Salt Yeast (Forkish) :: Forkish's point: time and temperature are ingredients. Long cold fermentation for flavour, use the starter at its peak, and the overnight levain schedule fits a working day.
[l:dekker] The Field Guide to Understanding Human Error (Dekker) :: Human error is a symptom, not a cause. Ask why the action made sense to the person at the time; blame makes people hide the information you need to learn.
[l:ddia] Designing Data-Intensive Applications: replication :: Kleppmann on replication lag: read-your-writes, monotonic reads and consistent prefix reads, and how each can be provided, for example by reading from the leader right after a write.
Thinking in Systems (Meadows) :: Stocks, flows and feedback loops. The places to intervene in a system: paradigms and goals beat parameters, although parameters are what everyone argues about.
[l:money] The Psychology of Money (Housel) :: Saving does not need a goal; reasonable beats rational; time in the market with index funds and compounding matter more than picking stocks. Room for error is the most underrated thing.
Atomic Habits: habit stacking :: Attach a new habit to an existing one: after I pour my coffee, I write down three tasks. Make it obvious, attractive, easy and satisfying.
A Philosophy of Software Design :: Ousterhout: deep modules with simple interfaces hiding a lot of functionality; complexity comes from dependencies and obscurity; define errors out of existence.
The Pragmatic Programmer, re-read :: Still good: tracer bullets, do not repeat knowledge (not code), broken windows. The chapter on estimating is better than I remembered.
Project Hail Mary :: Read it in two days. The friendship with Rocky carries the book; the science puzzles are fun even when they stretch things.
Middlemarch :: Slow first hundred pages, then wonderful. Dorothea and Lydgate both marry the wrong person for reasons that seemed right at the time.
The Design of Everyday Things :: Norman: affordances and signifiers; when people get a door wrong, the door is badly designed. Good notes on slips versus mistakes.
How Buildings Learn (Brand) :: Buildings change after they are built; low road buildings adapt best. The shearing layers (site, structure, skin, services, space plan, stuff) change at different rates.
Salt Fat Acid Heat :: Samin Nosrat's four elements: salt early, balance fat with acid, and heat is about texture. Made me salt the meat a day ahead.
Four Thousand Weeks :: Burkeman: you will never get on top of everything, so choose what to neglect. Limit work in progress to three projects.
The Wager (Grann) :: Shipwreck, mutiny, and then two rival accounts of what happened. Good on how people rewrite a story after the fact.
Deep Work :: Newport: schedule blocks of focus and protect them; shallow work expands to fill the day. Two mornings a week without meetings has been worth it.
[d:release] [l:retry] Release It!: circuit breakers and timeouts :: Nygard: every integration point will fail. Use timeouts everywhere, circuit breakers to stop calling a dead dependency, and bulkheads so one failure cannot sink the ship.
Database Internals: B-trees and LSM trees :: B-trees update in place and favour reads; LSM trees turn writes into sequential appends and pay with compaction and read amplification.
Educated (Westover) :: A memoir of growing up without school and getting to Cambridge. Hard to read in places; about how memory differs between family members.
[l:checklist] The Checklist Manifesto :: Gawande: checklists catch the simple steps experts skip under pressure. Short, read-do or do-confirm, tested in real use, with a pause point.
Summer reading list :: The Overstory, Piranesi, A Gentleman in Moscow, Thinking Fast and Slow, and the second half of Middlemarch.
Dune, re-read :: Better the second time: the politics and ecology more than the plot. The appendix on the ecology of Dune is worth reading first.
[d:release] Notes on Release It! (Nygard) :: Integration points are where systems die. Always set timeouts, put circuit breakers in front of dependencies that can hang, and isolate resources with bulkheads.
Kindle highlights export :: The clippings file on the Kindle has every highlight; a small script splits it by book into markdown files for these notes.
@travel
Lisbon in three days :: Trams 28 and 15, the Alfama on foot early before the crowds, pastel de nata at Manteigaria, and a day trip to Sintra by train. Hills everywhere: bring proper shoes.
Japan Rail Pass, worth it? :: For Tokyo, Kyoto, Hiroshima and back the 7 day pass barely paid off after the price increase. Single Shinkansen tickets plus a Suica card would have been simpler.
Carry-on only for a week :: Seven days in one 40 litre bag: three shirts, two trousers, merino socks, a light jacket, washing in the sink on day four. Liquids in one bag at the top.
[l:eu261] Flight delayed five hours: EU261 claim :: The flight home from Porto landed 5 hours late because of a technical fault, which qualifies for 400 euros each under EU261. Filed the claim on the airline's form with booking reference and boarding passes.
Travel insurance: what the policy covers :: The annual policy covers cancellation up to 5000 per person, medical abroad, and luggage up to 1500, but not electronics over 500 per item. Winter sports need the add-on.
[l:camp] Camping in the Dolomites :: Four nights at a campsite near Cortina with hikes to the Tre Cime. Nights were cold, 3 degrees; the one-pot meals plan worked and the gas lasted.
Jet lag plan for Tokyo :: Shift bedtime an hour earlier for three days before, sunlight in the morning after arrival, no nap after 3 pm on day one. Worked better than last time.
Renting a car in Iceland :: Took gravel protection after reading about windscreen damage, and it paid off: one chip on the road to Dettifoss. Fuel stations are far apart in the east; fill up at half a tank.
[d:passport] Passport renewal takes ten weeks :: Renewed the kids' passports in March for a trip in June and they arrived after ten weeks, four more than the website said. Renew at least three months before any trip.
Train from London to Edinburgh :: Four and a half hours, book ten weeks ahead for the cheap advance fares, sit on the right side going north for the coast after Newcastle.
Rome: apartment versus hotel :: The apartment near Campo de' Fiori was cheaper per night but loud until 2 am; next time a hotel in Monti or Trastevere with double glazing.
Power adapters and a travel charger :: One multi-port USB-C charger with swappable plugs instead of four adapters. The UK plug is the one always forgotten.
eSIM for data abroad :: Bought a 10 GB eSIM for Japan before leaving; installed it at home and switched it on at landing. Much cheaper than roaming.
Lost luggage in Frankfurt :: The checked bag missed the connection in Frankfurt and arrived two days later. Filed the report at the airport, kept receipts for toiletries and clothes; the airline refunded 180.
Kyoto temples at opening time :: Fushimi Inari at 7 am was nearly empty; by 10 it was shoulder to shoulder. Kiyomizu-dera and the bamboo grove also before 8.
Ligurian coast road trip :: Genoa to the Cinque Terre along the coast; leave the car in Levanto and take the train between the villages, parking in them is impossible.
India e-visa :: The e-visa came through in four days, but the photo was rejected once for the background. Print it; immigration wanted the paper.
Working from a hotel: Wi-Fi and VPN :: Hotel Wi-Fi blocked the UDP port of the work VPN, so I tethered from the phone for calls. Bring a travel router that can run the VPN over TCP 443.
[l:fxcard] Paying abroad without card fees :: The bank card charged 2.75 percent on every foreign payment. The travel card with no foreign transaction fee, always paying in the local currency, saved about 90 on the Japan trip.
Booking trains in Italy :: Frecciarossa fares drop a lot two months ahead; regional trains have fixed prices and need no booking, but validate paper tickets before boarding.
Levada walks in Madeira :: The Levada do Caldeirão Verde is 13 km with tunnels: bring a headlamp and a rain jacket. Start early, clouds come up the valley by noon.
Long flights with small kids :: A new cheap toy every hour, snacks they rarely get, the tablet with downloaded shows, and an aisle seat. Book the bassinet row for babies.
[l:ski] Ski week budget :: Six days in Austria for four people: apartment 1400, lift passes 1150, rental 420, food 600, fuel and tolls 250. Book the apartment by October.
Berlin Christmas markets :: Gendarmenmarkt is pretty but charges entry; the market at Charlottenburg palace was the best. Bring a mug deposit coin.
[d:passport] Renew passports early :: Passport renewal for the children took almost three months this spring, much longer than the six weeks quoted. Apply well ahead of travel, at least a quarter of a year.
Tokyo transit with Suica on the phone :: Added a Suica card to the phone wallet and topped it up by card; works on every train, bus and convenience store. No need for paper tickets in the city.
[m:finance] Night train from Vienna to Venice :: The Nightjet from Vienna to Venice: a couchette for four, leaves at 9 pm, arrives 8:30 am. Bring water and earplugs; the border check wakes everyone at 2 am.
@finance
[l:money] Index funds: automatic monthly investment :: 600 a month goes into a global index fund on the 2nd, the day after salary. Total fees 0.2 percent a year. Do not look at it more than once a quarter.
Emergency fund target :: Six months of essential spending in an instant-access savings account, about 15,000. Only for job loss or big repairs, not holidays.
Mortgage overpayment versus investing :: The mortgage is fixed at 1.9 percent until 2027, so overpaying earns less than the savings account pays. Revisit when the fix ends.
[l:eu261] EU261 compensation arrived :: The airline paid 1600 for the four of us for the delayed Porto flight, eleven weeks after the claim. Put it in the holiday fund.
[l:dehum] Electricity bill spike in August :: The August bill was 40 percent higher than July. The smart meter data points at the basement dehumidifier running all day; set it to 55 percent and a timer.
[l:roof] Saving for the roof :: The roof needs replacing within two years, 16,000 for the quote we like. Saving 700 a month in a separate pot and not touching the emergency fund.
Home office deduction on the tax return :: Claimed the flat-rate home office allowance for 140 days at home, plus half of the new desk chair. Keep the receipts for four years.
Budget spreadsheet categories :: Housing, utilities, groceries, transport, kids, health, subscriptions, holidays, gifts, irregular. Irregular is where the surprises go; review it monthly.
[l:fxcard] Card with no foreign transaction fees :: Opened a card that charges no foreign transaction fee and use it for every payment abroad and for online shops in other currencies. Always choose to be charged in the local currency.
[d:subs] Subscription audit :: Went through three months of statements: seven subscriptions, two unused (the language app and a second music service). Cancelled them, saving 27 a month.
Pension: get the full company match :: The employer matches contributions up to 5 percent of salary. Raised mine from 3 to 5 percent; it is the best return available anywhere.
Car insurance renewal :: The renewal quote was 30 percent up on last year. Compared three providers and switched to one 210 cheaper with the same cover.
Kids' savings accounts :: 50 a month for each child into a junior account, plus birthday money from the grandparents. Locked until 18.
[l:boiler] Receipts for the boiler repair :: The plumber's invoice for recharging the expansion vessel and replacing the pressure relief valve: 265. Filed with the home repair receipts for the landlord of the rental flat we own.
Rebalancing once a year :: Every January move the portfolio back to 80 percent equities and 20 percent bonds; only with new money if possible, to avoid selling.
Fixed versus variable energy tariff :: The fixed tariff for two years costs about 6 percent more than the variable one now, but the bill can be planned. Took the fixed one.
Annual insurance review :: Every November: home, contents, car, travel, life. Check that the sums insured still match, and that nothing is paid twice.
[l:ski] Splitting costs for the ski week :: Shared spreadsheet with the other family: apartment and fuel split by family, food by person, lift passes each their own. Settled by bank transfer at the end.
Phishing text pretending to be the bank :: An SMS said a payment was blocked and linked to a fake login page. The bank never sends links; reported it by forwarding to 7726 and deleted it.
Net worth, tracked quarterly :: Once a quarter: accounts, pension, funds, house estimate, minus mortgage. The trend matters, not the number.
[d:subs] Cancelled unused subscriptions :: Read through the last three card statements and found two subscriptions nobody used, the language app and a duplicate music plan. Cancelled both; 27 a month saved.
Capital gains allowance :: Sell enough fund units each year to use the tax-free capital gains allowance and buy them back in the pension wrapper.
Selling the old car :: Got three online offers for the old hatchback: 3100, 3400 and 3650. A private sale might reach 4000 but the hassle is not worth 350.
Inflation and the savings rate :: Savings account pays 3.1 percent, inflation is 2.4, so for the first time in years cash is not losing value. Still keep only the emergency fund in cash.
Gift aid on charity donations :: Tick gift aid on every donation; the charity claims the basic rate back and the higher rate relief goes on the tax return.
"""


def parse(notes):
    entries, topic = [], None
    for ln in notes.strip().split("\n"):
        if ln.startswith("@"):
            topic = ln[1:].strip()
            continue
        labels = []
        while True:
            m = re.match(r"\[([dlm]):([a-z0-9-]+)\] ", ln)
            if not m:
                break
            labels.append((m.group(1), m.group(2)))
            ln = ln[m.end():]
        title, sep, text = ln.partition(" :: ")
        if not sep or not title or not text or topic is None:
            sys.exit("make_kb.py: bad note line: %r" % ln)
        e = {"topic": topic, "belongs": topic, "title": title.strip(), "text": text.strip(), "dup": None, "link": None}
        for kind, name in labels:
            if kind == "d":
                e["dup"] = name
            elif kind == "l":
                e["link"] = name
            else:
                e["topic"] = name  # filed under another topic than it belongs to
        entries.append(e)
    return entries


def groups(entries, key):
    g = {}
    for e in entries:
        if e[key]:
            g.setdefault(e[key], []).append(e)
    return g


def build():
    entries = parse(NOTES)
    titles = [e["title"] for e in entries]
    if len(set(titles)) != len(titles):
        sys.exit("make_kb.py: duplicate titles")
    dups, links = groups(entries, "dup"), groups(entries, "link")
    for name, g in dups.items():
        if len(g) < 2:
            sys.exit("make_kb.py: near-duplicate group %s has one entry" % name)
    for name, g in links.items():
        if len(g) < 2 or len({e["topic"] for e in g}) < 2:
            sys.exit("make_kb.py: link group %s does not span two topics" % name)
    order = list(range(len(entries)))
    random.Random(21).shuffle(order)
    t0 = datetime.datetime(2025, 1, 6, 8, 30)
    lines = []
    for k, i in enumerate(order):
        e = entries[i]
        ts = t0 + datetime.timedelta(days=2 * k, minutes=(37 * k) % 600)
        lines.append(json.dumps({"topic": e["topic"], "title": e["title"], "text": e["text"],
                                 "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ")}, ensure_ascii=False))
    # a retracted entry and its deletion, and a line a broken client wrote
    lines.append(json.dumps({"topic": "finance", "title": "Draft: salary negotiation numbers",
                             "text": "Draft numbers for the salary talk; do not keep in the shared notes.",
                             "ts": "2026-07-01T09:00:00Z"}))
    offset = sum(len(l.encode()) + 1 for l in lines[:-1])
    lines.append(json.dumps({"delete": offset}))
    lines.append('{"topic": "cooking", "title": "Focaccia", "text": "truncated by a crashed wri')
    data = "\n".join(lines) + "\n"
    # labels: near-duplicate clusters, link groups (pairs across topics count),
    # misfiled entries; all by title
    labels = {
        "entries": len(entries),
        "topics": sorted({e["topic"] for e in entries}),
        "near_duplicates": [sorted(e["title"] for e in g) for _, g in sorted(dups.items())],
        "links": [sorted(e["title"] for e in g) for _, g in sorted(links.items())],
        "misfiled": [{"title": e["title"], "filed": e["topic"], "belongs": e["belongs"]}
                     for e in entries if e["topic"] != e["belongs"]],
        "retracted": "Draft: salary negotiation numbers",
    }
    return data, json.dumps(labels, indent=1, ensure_ascii=False) + "\n"


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    paths = [os.path.join(root, "examples", "kb", "data.log"), os.path.join(root, "bench", "kb_labels.json")]
    outs = build()
    if sys.argv[1:] == ["--check"]:
        stale = [p for p, s in zip(paths, outs) if not os.path.exists(p) or open(p, encoding="utf-8").read() != s]
        for p in stale:
            print("make_kb.py: %s is not what make_kb.py writes; run python3 examples/kb/make_kb.py" % p)
        sys.exit(1 if stale else 0)
    if sys.argv[1:]:
        sys.exit("usage: make_kb.py [--check]")
    for p, s in zip(paths, outs):
        with open(p, "w", encoding="utf-8") as f:
            f.write(s)


if __name__ == "__main__":
    main()
