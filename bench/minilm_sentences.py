#!/usr/bin/env python3
"""Deterministic, varied sentences for comparing helix's all-MiniLM-L6-v2 with sentence-transformers:
3-80 words; technical and everyday prose, questions, numbers (versions, money, dates, decimals),
heavy punctuation, URLs, accents (é, ñ, ø, ß, Ł), Greek/Cyrillic, Chinese/Japanese/Korean, emoji,
casing changes, odd whitespace (tabs, no-break space) and invisible format characters; every 10th
line starts a paraphrase pair (lines k and k+1 say the same thing in other words).
One sentence per line, no newlines inside; the same N gives the same lines on every run.
  python3 bench/minilm_sentences.py 1000 > sentences.txt"""
import random
import sys

SUBJ = ["The scheduler", "Our cache layer", "A junior engineer", "The database replica", "Each worker thread",
        "The GPU kernel", "This tokenizer", "The release manager", "A failing test", "The load balancer",
        "Café owners in Zürich", "The naïve implementation", "Half of the cluster", "The on-call SRE",
        "Version 2.3.1", "My grandmother", "The kids next door", "A stray cat", "Señora Muñoz", "The Ørsted team",
        "Herr Großmann", "Łukasz from Kraków", "The façade crew", "O'Brien's pub", "The U.S. office"]
VERB = ["rejects", "retries", "compresses", "flushes", "rebuilds", "logs", "indexes", "throttles", "migrates",
        "serializes", "validates", "quantizes", "prefetches", "shards", "summarizes", "bakes", "paints",
        "forgets", "borrows", "celebrates"]
OBJ = ["every incoming request", "the write-ahead log", "stale embeddings", "the nightly backup", "user sessions",
       "4096 tokens per batch", "the 99th-percentile latency", "corrupted pages", "the config file",
       "expired TLS certificates", "a 10 MB JSON line", "the KV cache", "duplicate entries", "old snapshots",
       "a crème brûlée", "the jalapeño salsa", "3.5 kg of flour", "$1,299.99 worth of gear", "the résumé",
       "€45 parking tickets", "the 2024-03-15 invoice", "two dozen piñatas", "an À-la-carte menu"]
TAIL = ["before the deadline", "after a kill -9", "when memory runs low", "under heavy load", "on every restart",
        "without losing data", "in under a minute", "as the docs describe", "for the third time today",
        "because nobody noticed", "while the daemon sleeps", "(see issue #42)", "— or so we hoped", "at 3 a.m.",
        "at 10:45pm", "on 12/31/1999", "in São Paulo", "near the Øresund bridge", "[citation needed]",
        "... again!", "via https://example.com/a?b=1&c=2", "ASAP!!!", "(~30% faster)", "— 100% guaranteed"]
Q = ["Why does", "How often does", "When exactly does", "Should we check whether", "Is it true that"]
FOREIGN = ["你好，世界！", "机器学习很有趣。", "東京は日本の首都です", "カタカナとひらがな", "안녕하세요 여러분",
           "Привет, как дела?", "Καλημέρα κόσμε", "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया",
           "Ça va très bien, merci.", "¿Dónde está la biblioteca?", "Straße und Fußgänger", "Ἀρχιμήδης",
           "ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ", "ﬁne ligatures", "Ⅻ o'clock", "x² + y² = z²", "½ cup of milk",
           "naïve coöperation", "Ångström units", "Dvořák's symphony", "İstanbul'da", "🙂 emoji 🚀 test 👍🏽"]
ODD = ["\t", "\u00a0", "\u200b", "\u2009", "\u3000", "  "]
WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact be have do say get make go know take see come think look "
         "want give use find tell ask seem feel try leave call good new first last long great little own other "
         "old right big high different small large next early young important few public bad same able").split()

# Paraphrase pairs: the same event said two ways (subject, verb phrase, object) x 2.
PARA = [("The server crashed", "because it ran out of memory", "during the nightly import"),
        ("The meeting was moved", "to Thursday afternoon", "because the manager is travelling"),
        ("She forgot her password", "and had to reset it", "twice this week"),
        ("Our GPU bill doubled", "since the training cluster sits idle", "most of the month"),
        ("The train was late", "by forty minutes", "due to snow on the tracks"),
        ("He cooked pasta", "with fresh tomatoes and basil", "for the whole family")]
PARA2 = [("The machine went down", "after exhausting its RAM", "while importing data overnight"),
         ("We rescheduled the meeting", "for Thursday after lunch", "since the boss is on a trip"),
         ("She could not remember her login", "so she changed it", "two times in the last few days"),
         ("Our graphics-card costs are twice as high", "because the cluster is unused", "for weeks"),
         ("The railway service arrived", "forty minutes behind schedule", "as snow covered the line"),
         ("He made spaghetti", "using ripe tomatoes and basil leaves", "to feed everyone at home")]


def clause(r):
    if r.random() < 0.2:
        return f"{r.choice(Q)} {r.choice(SUBJ).lower()} {r.choice(VERB)[:-1]} {r.choice(OBJ)}?"
    if r.random() < 0.15:
        return f"{r.choice(SUBJ)} said: “{r.choice(FOREIGN)}”"
    if r.random() < 0.1:
        return " ".join(r.choice(WORDS) for _ in range(r.randint(3, 12))).capitalize() + r.choice(".!?;")
    return f"{r.choice(SUBJ)} {r.choice(VERB)} {r.choice(OBJ)} {r.choice(TAIL)}."


def sentence(r):
    target = r.choice([r.randint(3, 8), r.randint(8, 30), r.randint(30, 80)])
    parts = []
    while sum(len(p.split()) for p in parts) < target:
        parts.append(clause(r))
    words = " ".join(parts).split()[:target]
    if r.random() < 0.15:   # odd whitespace / invisible characters between some words
        k = r.randrange(len(words))
        words[k] += r.choice(ODD)
    s = " ".join(words)
    u = r.random()
    if u < 0.07:
        s = s.upper()
    elif u < 0.1:
        s = s.lower()
    return s


WHEN = ["", "Yesterday", "Last Monday", "On 3 May", "Again", "In Lyon", "At 9:30", "Sadly", "As expected"]


def paraphrase(r):
    i = r.randrange(len(PARA))
    a, b = PARA[i], PARA2[i]
    w = r.choice(WHEN)
    if r.random() < 0.5:
        x, y = f"{a[0]} {a[1]} {a[2]}.", f"{b[0]} {b[1]} {b[2]}."
    else:
        x, y = f"{a[2][0].upper()}{a[2][1:]}, {a[0][0].lower()}{a[0][1:]} {a[1]}.", f"{b[0]} {b[1]}, {b[2]}."
    if w:
        x, y = f"{w}, {x[0].lower()}{x[1:]}", f"{w}, {y[0].lower()}{y[1:]}"
    return x, y


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    r = random.Random(20261123)
    out = []
    while len(out) < n:
        if len(out) % 10 == 0 and len(out) + 1 < n:
            out.extend(paraphrase(r))
        else:
            out.append(sentence(r))
    for s in out[:n]:
        assert "\n" not in s and "\r" not in s
        sys.stdout.write(s + "\n")


if __name__ == "__main__":
    main()
