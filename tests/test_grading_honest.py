"""No false positives, on the real artifacts: for every computational exercise of the
chapters with exercises (2-16), (a) the instructor's solution pasted into the committed
student edition (its real setup cell and all) and (b) a second honest solution in another
style (other names, loops instead of vectorised code, locals that shadow the notebook's
variables such as ``maps``, ``m``, ``model``, ``ex``) both get full marks from ``python -m cmix_course grade``'s code path
(:func:`cmix_course.gradebook.grade_class`), in quick mode with ``answers_only`` (the setup
cell, the student's cells and the book's cells they need) and two submissions at a time.

Graded one chapter at a time (the two styles of a chapter together), so that one chapter's
tests can be selected: ``pytest tests/test_grading_honest.py -k ch16``."""
from __future__ import annotations

import time

import pytest

from cmix_course.editions import EXERCISE_CHAPTERS
from cmix_course.gradebook import grade_class, write_gradebook
from cmix_course.grading import PASSED
from tests.test_grading_submissions import ROOT, chapter, instructor_solutions, submission

CHAPTERS = list(EXERCISE_CHAPTERS)

#: The second honest solution of each exercise, in another style.
OTHER_STYLE = {
    "attention_probs": '''import math as _m

def attention_probs(layer, hidden):
    attn = layer.attention.self
    heads = attn.num_attention_heads
    x = hidden[0]
    size = x.shape[1] // heads
    Q, K = attn.query(x), attn.key(x)
    maps = []
    for h in range(heads):
        q = Q[:, h * size:(h + 1) * size]
        k = K[:, h * size:(h + 1) * size]
        maps.append(torch.softmax(q @ k.T / _m.sqrt(size), dim=-1))
    return torch.stack(maps)''',
    "ln_terms": '''def ln_terms(parts, ln):
    total = parts.sum(dim=0)
    mu = total.mean(-1, keepdim=True)
    sigma = (((total - mu) ** 2).mean(-1, keepdim=True) + ln.eps).sqrt()
    out = []
    for k in range(parts.shape[0]):
        p = parts[k]
        out.append(ln.weight * (p - p.mean(-1, keepdim=True)) / sigma)
    return torch.stack(out)''',
    "my_rollout": '''def my_rollout(maps, add_identity):
    n = np.asarray(maps[0]).shape[-1]
    out, prev = [], None
    for l in range(len(maps)):
        m = np.array(maps[l], dtype=float)
        if add_identity:
            for i in range(n):
                m[i, i] += 1.0
            for i in range(n):
                m[i] = m[i] / m[i].sum()
        prev = m if prev is None else m @ prev
        out.append(prev)
    return np.array(out)''',
    "my_flow": '''from collections import deque

def my_flow(maps, i, j, add_identity):
    # Edmonds-Karp on the layered graph, in plain Python (no networkx)
    layers, n = len(maps), len(maps[0])
    residual, nbrs = {}, {}
    for l in range(layers):
        for b in range(n):
            for k in range(n):
                c = float(maps[l][b][k])
                if add_identity:
                    c = 0.5 * c + (0.5 if k == b else 0.0)
                u, v = (l, k), (l + 1, b)
                residual[u, v] = c
                residual.setdefault((v, u), 0.0)
                nbrs.setdefault(u, []).append(v)
                nbrs.setdefault(v, []).append(u)
    source, sink, total = (0, j), (layers, i), 0.0
    while True:
        parent = {source: None}
        queue = deque([source])
        while queue and sink not in parent:
            u = queue.popleft()
            for v in nbrs.get(u, []):
                if v not in parent and residual[u, v] > 0.0:
                    parent[v] = u
                    queue.append(v)
        if sink not in parent:
            return total
        path, v = [], sink
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        push = min(residual[e] for e in path)
        for u, v in path:
            residual[u, v] -= push
            residual[v, u] += push
        total += push''',
    "my_ig": '''def my_ig(f, x, baseline, n_steps):
    diff = (x - baseline).detach()
    acc = torch.zeros_like(diff)
    for k in range(1, n_steps + 1):
        z = (baseline + (2 * k - 1) / (2 * n_steps) * diff).clone().detach()
        z.requires_grad = True
        f(z).backward()
        acc = acc + z.grad
    return (diff * acc).sum(dim=1).numpy() / n_steps''',
    "my_causal_rollout": '''def my_causal_rollout(maps):
    # torch, float32, a loop over the rows (the checker accepts float32's rounding)
    m = torch.as_tensor(np.asarray(maps), dtype=torch.float32)
    L, n, _ = m.shape
    rolled = torch.zeros(L, n, n)
    for l in range(L):
        step = torch.zeros(n, n)
        for i in range(n):
            step[i] = m[l, i] / m[l, i].sum()
        rolled[l] = step if l == 0 else step @ rolled[l - 1]
    return rolled''',
    "my_logit_explanation": '''def my_logit_explanation(target, foil, rollout, p):
    L, n = len(rollout), len(rollout[0])
    ex = [0.0] * n                     # shadows the chapter's example `ex`
    for l in range(L):
        s = [float(a - b) for a, b in zip(target["sources"][l][p], foil["sources"][l][p])]
        if l == 0:
            ex = [x + y for x, y in zip(ex, s)]
            continue
        for j in range(n):
            ex[j] += sum(s[k] * float(rollout[l - 1][k][j]) for k in range(n))
    ex[p] += float(target["embedding"][p] - foil["embedding"][p])
    return np.array(ex)''',
    "my_value_bias": '''def my_value_bias(alpha, b_V, W_O):
    heads, n = alpha.shape[0], alpha.shape[1]
    size = b_V.shape[0] // heads
    out = torch.zeros(n, n, W_O.shape[1], dtype=b_V.dtype)
    for h in range(heads):
        rows = slice(h * size, (h + 1) * size)
        vec = b_V[rows] @ W_O[rows]                  # b_V^h W_O^h
        out += alpha[h][:, :, None] * vec[None, None, :]
    return out''',
    "my_n_res_ln": '''def my_n_res_ln(alpha, fx, x, b_O, ln1):
    H, n, _ = alpha.shape
    rows = []
    for i in range(n):
        z = sum(alpha[h, i, :, None] * fx[h] for h in range(H)).clone()   # F_ij, (n, d)
        z[i] = z[i] + x[i]
        p = z.sum(0) + b_O
        s = torch.sqrt(((p - p.mean()) ** 2).mean() + ln1.eps)
        T = ln1.weight * (z - z.mean(-1, keepdim=True)) / s
        rows.append(T.norm(dim=-1))
    return torch.stack(rows)''',
    "my_mixing_ratio": '''def my_mixing_ratio(T):
    n = T.shape[0]
    ratios = []
    for i in range(n):
        context = torch.zeros(T.shape[-1], dtype=T.dtype)
        for j in range(n):
            if j != i:
                context = context + T[i, j]
        a = float((context ** 2).sum().sqrt())
        b = float((T[i, i] ** 2).sum().sqrt())
        ratios.append(a / (a + b))
    return np.array(ratios)''',
    "my_word_map": '''def my_word_map(C, word_ids):
    C = np.asarray(C, dtype=float)
    starts = [i for i, w in enumerate(word_ids)
              if i == 0 or w is None or word_ids[i - 1] is None or w != word_ids[i - 1]]
    bounds = list(zip(starts, starts[1:] + [len(word_ids)]))   # each word's pieces a..b-1
    return np.array([[C[a:b, c:d].sum() / (b - a) for c, d in bounds]
                     for a, b in bounds])''',
    "my_row_entropy": '''from scipy.special import xlogy

def my_row_entropy(C):
    return np.array([-xlogy(row, row).sum() for row in np.asarray(C, dtype=float)])''',
    "my_row_spread": '''def my_row_spread(C):
    rows = [list(map(float, r)) for r in C]
    n = len(rows)
    dist = []
    for i in range(n):
        for k in range(n):
            common = sum(min(a, b) for a, b in zip(rows[i], rows[k]))
            dist.append(1.0 - common)                 # TV = 1 - sum_j min(p_j, q_j)
    floor = sum(min(rows[i][j] for i in range(n)) for j in range(n))
    return sum(dist) / len(dist), max(dist), floor''',
    "my_nenc": '''def my_nenc(T, u, ln2):
    out = torch.zeros(T.shape[0], T.shape[1], dtype=T.dtype)
    for i in range(T.shape[0]):
        sigma = (u[i].var(unbiased=False) + ln2.eps).sqrt()
        for j in range(T.shape[1]):
            v = T[i, j] - T[i, j].mean()
            out[i, j] = (ln2.weight * v / sigma).norm()
    return out''',
    "my_alti_row": '''def my_alti_row(T, y):
    y_norm = float(y.abs().sum())
    c = []
    for j in range(T.shape[0]):
        c.append(max(y_norm - float((y - T[j]).abs().sum()), 0.0))
    total = sum(c)
    return np.array([v / total for v in c])''',
    "my_vz_row": '''def my_vz_row(layer, hidden, i):
    value = layer.attention.self.value

    def run():
        out = layer(hidden)
        out = out[0] if isinstance(out, tuple) else out
        return out[0, i].double()

    with torch.no_grad():
        base = run()
        scores = []
        for j in range(hidden.shape[1]):
            def hook(module, inputs, output, j=j):
                output = output.clone()
                output[:, j] = 0.0
                return output
            handle = value.register_forward_hook(hook)
            try:
                new = run()
            finally:
                handle.remove()
            a, b = new / new.norm(), base / base.norm()
            scores.append(0.5 * ((a - b) ** 2).sum())
        scores = torch.stack(scores)
    return scores / scores.sum()''',
    "my_gxi": '''def my_gxi(model, ids, pos, t_id, f_id):
    x = model.get_input_embeddings()(ids).detach().clone().requires_grad_(True)
    logits = model(inputs_embeds=x).logits
    (g,) = torch.autograd.grad(logits[0, pos, t_id] - logits[0, pos, f_id], x)
    m = g[0] * x[0].detach()
    return [float(v) for v in m.pow(2).sum(-1).sqrt()]''',
    "my_cue_alignment": '''def my_cue_alignment(scores, cue_indices):
    vals = [max(float(v), 0.0) for v in np.ravel(scores)]
    s = [v / sum(vals) for v in vals]
    cue = {int(c) for c in cue_indices}
    dot = sum(s[j] for j in cue)
    ap, prev_recall = 0.0, 0.0
    for t in sorted(set(s), reverse=True):
        got = [j for j in range(len(s)) if s[j] >= t]
        hits = sum(1 for j in got if j in cue)
        recall = hits / len(cue)
        ap += (recall - prev_recall) * hits / len(got)
        prev_recall = recall
    best = max(s[j] for j in cue)
    return {"dot": dot, "ap": ap, "probes_needed": sum(1 for v in s if v > best)}''',
    "my_online_code": '''import math

def my_online_code(probs, labels, bounds):
    n, k = len(labels), len(probs[0])
    first = int(bounds[0])
    bits = first * math.log2(k)
    for i in range(first, n):
        bits -= math.log2(float(probs[i][int(labels[i])]))
    return bits, n * math.log2(k) / bits''',
    "my_random_baselines": '''from fractions import Fraction

def my_random_baselines(n, c):
    # exact rational arithmetic, AP as the mean over ranks of P(cue at r) E[Prec@r]
    ap = Fraction(0)
    for r in range(1, n + 1):
        ap += Fraction(1, n) * (1 + Fraction((c - 1) * (r - 1), n - 1)) / r
    return {"dot": float(Fraction(c, n)), "ap": float(ap),
            "probes_needed": float(Fraction(n - c, c + 1))}''',
    "my_prior_code": '''import math

def my_prior_code(labels, bounds, n_classes):
    labels = [int(v) for v in labels]
    seen = [0] * n_classes
    total, start = 0.0, 0
    for end in bounds:
        block = labels[start:end]
        for v in block:                      # counts of the blocks before this one
            total += math.log2((start + n_classes) / (seen[v] + 1))
        for v in block:
            seen[v] += 1
        start = end
    return total, len(labels) * math.log2(n_classes) / total''',
    "my_faithfulness": '''def my_faithfulness(s_method, s_bo, t):
    n = len(s_method)
    idx = [j for j in range(1, n - 1) if j != t]
    a = [float(s_method[j]) for j in idx]
    b = [float(s_bo[j]) for j in idx]
    if len(idx) < 2 or len(set(a)) == 1 or len(set(b)) == 1:
        return float("nan")

    def ranks(v):
        order = sorted(range(len(v)), key=lambda q: v[q])
        r, i = [0.0] * len(v), 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for q in range(i, j + 1):
                r[order[q]] = (i + j) / 2 + 1
            i = j + 1
        return np.array(r)

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))''',
    "my_special_rank": '''def my_special_rank(scores, tokens):
    vals = [float(v) for v in np.ravel(scores)]
    rank = {v: r + 1 for r, v in enumerate(sorted(set(vals)))}
    picked = [rank[vals[j]] / len(tokens) for j, tok in enumerate(tokens)
              if tok in ("[CLS]", "[SEP]", ",", ".")]
    return sum(picked) / len(picked)''',
    "my_anisotropy": '''def my_anisotropy(T):
    r, n, _ = T.shape
    out = []
    for q in range(r):
        u = torch.nn.functional.normalize(T[q], dim=-1)
        sims = u @ u.T
        out.append((sims.sum() - sims.diagonal().sum()) / (n * (n - 1)))
    return torch.stack(out)''',
    "my_cls_spearman": '''from scipy.stats import rankdata

def my_cls_spearman(maps, saliency, normalize):
    maps = [np.array(x, dtype=float) for x in maps]
    if normalize:
        maps = [x / x.sum(axis=1, keepdims=True) for x in maps]
    rolled, out = None, []
    for m in maps:
        rolled = m if rolled is None else m @ rolled
        out.append(np.corrcoef(rankdata(rolled[0]), rankdata(saliency))[0, 1])
    return out''',
    "my_blank_out": '''import torch

def my_blank_out(model, ids, pos, t_id, f_id, r_id):
    def margin(x):
        with torch.no_grad():
            logits = model(input_ids=x).logits[0, pos]
        return torch.sigmoid(logits[t_id] - logits[f_id])

    base = margin(ids)
    out = []
    for j in range(ids.shape[1]):
        x = ids.clone()
        x[0, j] = r_id
        out.append(float(base - margin(x)))
    return out''',
    "my_identity_rollout_row": '''def my_identity_rollout_row(maps, i):
    n = len(maps[0])
    R = np.eye(n)
    out = []
    for m in maps:
        step = np.array(m, dtype=float) / 2
        step[np.diag_indices(n)] += 0.5
        R = step.dot(R)
        out.append(R[i, :])
    return np.array(out)''',
    "my_raw_cls_row": '''def my_raw_cls_row(norm_maps, row_sums):
    L, n = len(norm_maps), len(norm_maps[0])
    out = []
    for top in range(L):
        v = row_sums[top][0] * np.array(norm_maps[top][0], dtype=float)   # e_0 D C~
        for below in range(top - 1, -1, -1):
            v = (v * np.array(row_sums[below], dtype=float)) @ np.array(norm_maps[below])
        out.append(v)
    return np.vstack(out)''',
}


def test_every_exercise_has_a_second_style():
    names = {n for ch in CHAPTERS for n in instructor_solutions(ch)}
    assert names == set(OTHER_STYLE), names ^ set(OTHER_STYLE)


@pytest.fixture(scope="module", params=CHAPTERS, ids=[f"ch{ch:02d}" for ch in CHAPTERS])
def honest(request, tmp_path_factory):
    ch = request.param
    tmp = tmp_path_factory.mktemp(f"honest{ch:02d}")
    sol = instructor_solutions(ch)
    paths = [submission(ch, sol, tmp / f"inst{ch:02d}_{chapter(ch)}"),
             submission(ch, {n: OTHER_STYLE[n] for n in sol},
                        tmp / f"other{ch:02d}_{chapter(ch)}")]
    start = time.monotonic()
    grades = grade_class(paths, root=ROOT, quick=True, batch_seed=38, random_tests=2,
                         answers_only=True, jobs=2, check_timeout=120)
    seconds = time.monotonic() - start
    write_gradebook(grades, tmp / "out")
    print(f"\nchapter {ch}, honest submissions: {len(paths)} graded in {seconds:.0f} s "
          "(2 at a time): "
          + ", ".join(f"{g.student} {g.seconds:.0f} s" for g in grades))
    return grades


@pytest.mark.parametrize("style", ["inst", "other"])
def test_both_honest_solutions_get_full_marks(honest, style):
    bad = []
    for g in honest:
        if not g.student.startswith(style):
            continue
        for e in g.exercises:
            if e.kind == "computational" and (e.status != PASSED or e.points != e.max_points):
                bad.append((g.file, e.exercise, e.status, e.feedback[:4], g.error, g.notes[:3]))
    assert not bad, bad
