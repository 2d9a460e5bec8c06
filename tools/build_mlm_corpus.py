"""Build the English text used to adapt the offline MiniLM encoder to masked-language modelling.

Step 1 of the recipe ``make mlm-weights`` (see ``cmixlib/assets/minilm_mlm/README.md``).

Sources (none of them is an evaluation set of the book):

* **ELTeC-eng** (COST Action CA16204, ed. Lou Burnard): 100 English novels 1840-1920; the texts
  are in the public domain, the TEI markup is CC BY 4.0. ``git clone`` the repository
  ``COST-ELTeC/ELTeC-eng`` and pass its folder with ``--eltec``.
* **WikiText-2** (Merity et al. 2016, CC BY-SA 3.0), the *validation* and *test* files as
  shipped in ``pytorch/examples`` (``word_language_model/data/wikitext-2``); pass that
  folder with ``--wikitext``.
* The training splits already in ``data/``: SST-2 *train* and HateXplain *train* (the book
  evaluates on SST-2 dev and HateXplain test; MNLI is left out because its only split is dev).

Every text is split into sentences, and sentences are packed into passages of at most
``--max-words`` words (consecutive sentences of one document). Any sentence that also occurs
(case- and space-insensitively) in an evaluation set of the book -- the BLiMP agreement pairs, the
Linzen et al. agreement items, SST-2 dev, HateXplain test/val -- is removed. One in every
``--heldout-every`` documents' passages is held out for the masked-word accuracy (not trained on).

Writes ``<out>/train.txt``, ``<out>/heldout.txt`` and ``<out>/heldout_<source>.txt`` (one passage
per line) and
``<out>/manifest.json`` (sizes per source, sha256 of each file, the settings).
"""
from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEI = "{http://www.tei-c.org/ns/1.0}"
_SENT = re.compile(r"(?<=[.!?])[\"'’”)]*\s+(?=[\"'‘“(]?[A-Z0-9])")
_WS = re.compile(r"\s+")


def norm(s: str) -> str:
    """Key for the overlap check: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def sentences(text: str) -> list[str]:
    text = _WS.sub(" ", text).strip()
    return [s.strip() for s in _SENT.split(text) if s.strip()]


def pack(sents: list[str], max_words: int) -> list[str]:
    """Consecutive sentences joined into passages of at most ``max_words`` words."""
    out, cur, n = [], [], 0
    for s in sents:
        w = len(s.split())
        if w > max_words:
            continue
        if cur and n + w > max_words:
            out.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if cur:
        out.append(" ".join(cur))
    return out


def eltec_documents(folder: Path) -> list[tuple[str, list[str]]]:
    """(file name, paragraphs of the novel's body) for every readable ELTeC level-1/level-0 file."""
    docs = []
    for path in sorted(folder.glob("level*/*.xml")):
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        body = root.find(f"{TEI}text/{TEI}body")
        if body is None:
            continue
        paras = ["".join(p.itertext()) for p in body.iter(f"{TEI}p")]
        docs.append((path.name, [p for p in paras if p.strip()]))
    return docs


def wikitext_documents(folder: Path) -> list[tuple[str, list[str]]]:
    """(title, paragraphs) of WikiText-2 valid and test, with its tokenisation undone (sentences
    with an ``<unk>`` are dropped later)."""
    docs: list[tuple[str, list[str]]] = []
    for split in ("valid", "test"):
        title, paras = None, []
        for line in (folder / f"{split}.txt").read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if re.fullmatch(r"= [^=].* =", line):
                if title is not None:
                    docs.append((title, paras))
                title, paras = line.strip("= "), []
            elif line and not line.startswith("="):
                t = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
                t = re.sub(r" ([.,;:!?')])", r"\1", t).replace("( ", "(").replace(" 's", "'s")
                paras.append(t)
        if title is not None:
            docs.append((title, paras))
    return docs


def in_repo_documents() -> list[tuple[str, list[str]]]:
    """SST-2 train sentences and HateXplain train posts, one document per 200 texts."""
    import csv

    texts = []
    with open(REPO / "data/sst2/train.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts += [r["sentence"].strip() for r in rows if len(r["sentence"].split()) >= 6]
    texts += [t for t, _ in json.loads((REPO / "data/hatexplain/train.json").read_text())]
    return [(f"repo-{i}", texts[i:i + 200]) for i in range(0, len(texts), 200)]


def evaluation_sentences() -> set[str]:
    """Normalised sentences of every evaluation set in ``data/`` (never trained on)."""
    import csv

    keys: set[str] = set()
    for path in (REPO / "data/blimp").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            keys.update(norm(d[k]) for k in ("sentence_good", "sentence_bad") if k in d)
    for line in (REPO / "data/linzen_agreement/subj_agr_filtered.text").read_text().splitlines():
        keys.add(norm(line.replace("<eos>", "")))
    with open(REPO / "data/sst2/dev.tsv", encoding="utf-8") as f:
        keys.update(norm(r["sentence"]) for r in csv.DictReader(f, delimiter="\t",
                                                                quoting=csv.QUOTE_NONE))
    for split in ("test", "val"):
        hx = json.loads((REPO / f"data/hatexplain/{split}.json").read_text())
        keys.update(norm(t) for t, _ in hx)
    keys.discard("")
    return keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eltec", type=Path, required=True, help="clone of COST-ELTeC/ELTeC-eng")
    ap.add_argument("--wikitext", type=Path, required=True,
                    help="folder with WikiText-2 raw valid.txt and test.txt")
    ap.add_argument("--out", type=Path, default=REPO / ".cmix_cache/mlm_corpus")
    ap.add_argument("--max-words", type=int, default=80)
    ap.add_argument("--heldout-every", type=int, default=50)
    args = ap.parse_args()

    banned = evaluation_sentences()
    sources = {"eltec": eltec_documents(args.eltec), "wikitext2": wikitext_documents(args.wikitext),
               "repo": in_repo_documents()}
    train, heldout, stats = [], [], {}
    files_by_source: dict[str, list[str]] = {}
    for name, docs in sources.items():
        st = stats[name] = {"documents": len(docs), "passages": 0, "words": 0,
                            "removed_eval_overlap": 0, "heldout_passages": 0,
                            "heldout_documents": []}
        held_src: list[str] = []
        for i, (doc, paras) in enumerate(docs):
            sents = []
            for p in paras:
                for s in sentences(html.unescape(p)):
                    if "<unk>" in s:
                        continue
                    if norm(s) in banned:
                        st["removed_eval_overlap"] += 1
                    else:
                        sents.append(s)
            passages = pack(sents, args.max_words)
            if name != "repo" and i % args.heldout_every == args.heldout_every - 1:
                held_src += passages
                st["heldout_passages"] += len(passages)
                st["heldout_documents"].append(doc)
            else:
                train += passages
                st["passages"] += len(passages)
                st["words"] += sum(len(p.split()) for p in passages)
        heldout += held_src
        if held_src:
            files_by_source[f"heldout_{name}.txt"] = held_src
    args.out.mkdir(parents=True, exist_ok=True)
    files = {"train.txt": train, "heldout.txt": heldout, **files_by_source}
    manifest = {"settings": {"max_words": args.max_words, "heldout_every": args.heldout_every},
                "sources": stats, "files": {}}
    for fname, lines in files.items():
        blob = ("\n".join(lines) + "\n").encode("utf-8")
        (args.out / fname).write_bytes(blob)
        manifest["files"][fname] = {"lines": len(lines),
                                    "sha256": hashlib.sha256(blob).hexdigest()}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
