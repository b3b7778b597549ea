#!/usr/bin/env python3
"""Records what transformers' BertTokenizerFast gives for text holding BERT's
special-token strings, into golden.jsonl beside this file: per text, ids with
the small vocab.txt here (ids_small) and with bert-base-uncased (ids_bert).

  python make_golden.py BERT_VOCAB_TXT            write golden.jsonl
  python make_golden.py BERT_VOCAB_TXT --check    exit 1 when transformers
                                                  disagrees with golden.jsonl
Needs transformers (the test that runs --check skips without it)."""
import json, os, shutil, sys, tempfile
from transformers import BertTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = [
    "<s>not special</s> [CLS] [SEP]",
    "[CLS]", "[SEP][SEP]", "[MASK]", "[PAD] [UNK]",
    "a[MASK]b", "x [SEP]y", "[CLS]the cafe is open[SEP]",
    "[cls] [Sep] [ MASK ] [MASK ]", "[[MASK]]", "[unused0] [unused1]",
    "masked tokens in text: [MASK].", "[UNK][UNK]unk", "Café [MASK] ÉTÉ",
    "  [SEP]  ", "[CLS\n] [SEP", "<mask> <pad> </s>", "the [PAD]ded text",
]


def ids(vocab_txt, texts):
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(vocab_txt, os.path.join(d, "vocab.txt"))
        t = BertTokenizerFast.from_pretrained(d)
        return [t(x)["input_ids"] for x in texts]


def main():
    bert = sys.argv[1]
    rows = [{"text": x, "ids_small": a, "ids_bert": b}
            for x, a, b in zip(TEXTS, ids(os.path.join(HERE, "vocab.txt"), TEXTS), ids(bert, TEXTS))]
    out = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path = os.path.join(HERE, "golden.jsonl")
    if sys.argv[2:] == ["--check"]:
        if open(path, encoding="utf-8").read() != out:
            sys.exit("golden.jsonl differs from what BertTokenizerFast gives now")
        print("golden.jsonl agrees with BertTokenizerFast (%d texts)" % len(rows))
    else:
        open(path, "w", encoding="utf-8").write(out)


if __name__ == "__main__":
    main()
