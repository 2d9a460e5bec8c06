"""Word -> sub-token encoding, for any Hugging Face tokenizer.

Owns :class:`EncodedWords`, :func:`encode_words` and :func:`encode_words_batch` (fast tokenizers:
one batched call with character offsets; slow ones: word by word) and :func:`single_token_id`
(the vocabulary id of a word that is exactly one in-vocabulary sub-token, else None). The BLiMP set
(:mod:`.blimp`) and the SVA inputs (:mod:`.inputs`) build on these.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class EncodedWords:
    """A word sequence encoded with a tokenizer.

    ``input_ids`` includes the tokenizer's special tokens (``[CLS] ... [SEP]`` for BERT);
    ``word_to_tokens[w]`` lists the sub-token positions (indices into ``input_ids``) of word ``w``;
    ``special_positions`` are the positions of special tokens; ``text`` is the string that was
    tokenized.
    """

    input_ids: list[int]
    word_to_tokens: list[list[int]]
    special_positions: list[int]
    text: str


def encode_words(tokenizer: Any, words: Sequence[str], spaces: Sequence[bool] | None = None) -> EncodedWords:
    """Encode pre-split ``words`` and map every word to its sub-token positions.

    The words are joined into one string (``spaces[i]`` says whether a space follows word ``i``;
    by default every word but the last is followed by one) and tokenized once with special tokens,
    so sub-words get the same ids they get in running text (this matters for BPE tokenizers that
    mark a preceding space). With a fast tokenizer, sub-token ``k`` belongs to the word whose
    character span contains the first character of ``k``'s offset span. A word split into several
    sub-tokens owns all of them; a word that produces no sub-token (e.g. only whitespace) gets an
    empty list. Slow tokenizers (no offsets) fall back to encoding each word on its own and
    concatenating and wrapping in the special tokens (``build_inputs_with_special_tokens`` when the
    tokenizer has it, else ``[CLS]``/``[SEP]`` or BOS/EOS); that is exact for WordPiece
    vocabularies only.
    """
    return encode_words_batch(tokenizer, [words], None if spaces is None else [spaces])[0]


def _join_words(words: Sequence[str], spaces: Sequence[bool] | None) -> tuple[str, list[tuple[int, int]]]:
    if spaces is None:
        spaces = [True] * (len(words) - 1) + [False]
    pieces, spans, pos = [], [], 0
    for word, space in zip(words, spaces):
        spans.append((pos, pos + len(word)))
        pieces.append(word + (" " if space else ""))
        pos += len(pieces[-1])
    return "".join(pieces), spans


def encode_words_batch(tokenizer: Any, batch_words: Sequence[Sequence[str]],
                       batch_spaces: Sequence[Sequence[bool]] | None = None) -> list[EncodedWords]:
    """:func:`encode_words` for many word sequences at once (one batched tokenizer call when the
    tokenizer is fast). Returns one :class:`EncodedWords` per sequence, in order."""
    joined = [_join_words(list(w), None if batch_spaces is None else batch_spaces[i])
              for i, w in enumerate(batch_words)]
    if not getattr(tokenizer, "is_fast", False):
        return [_encode_words_slow(tokenizer, list(w), text) for w, (text, _) in zip(batch_words, joined)]
    if not joined:
        return []
    enc = tokenizer([text for text, _ in joined], return_offsets_mapping=True,
                    return_special_tokens_mask=True, add_special_tokens=True)
    out = []
    for b, (text, spans) in enumerate(joined):
        ids = list(enc["input_ids"][b])
        smask = enc["special_tokens_mask"][b]
        special = [k for k, m in enumerate(smask) if m]
        word_to_tokens: list[list[int]] = [[] for _ in spans]
        w = 0
        for k, (a, e) in enumerate(enc["offset_mapping"][b]):
            if smask[k] or e <= a:
                continue
            # skip leading whitespace some tokenizers include in the offset span
            while a < e and text[a].isspace():
                a += 1
            while w < len(spans) and spans[w][1] <= a:
                w += 1
            if w < len(spans) and spans[w][0] <= a < spans[w][1]:
                word_to_tokens[w].append(k)
        out.append(EncodedWords(ids, word_to_tokens, special, text))
    return out


def _encode_words_slow(tokenizer: Any, words: list[str], text: str) -> EncodedWords:
    # slow tokenizer: word-by-word
    body, word_to_tokens = [], []
    for word in words:
        piece = tokenizer.encode(word, add_special_tokens=False)
        word_to_tokens.append(list(range(len(body), len(body) + len(piece))))
        body.extend(piece)
    if hasattr(tokenizer, "build_inputs_with_special_tokens"):
        ids = list(tokenizer.build_inputs_with_special_tokens(body))
        mask = tokenizer.get_special_tokens_mask(body, already_has_special_tokens=False)
        offset = next((k for k, m in enumerate(mask) if not m), 0)
    else:  # wrap with [CLS]/[SEP] (or BOS/EOS) by hand
        first = getattr(tokenizer, "cls_token_id", None)
        first = first if first is not None else getattr(tokenizer, "bos_token_id", None)
        last = getattr(tokenizer, "sep_token_id", None)
        last = last if last is not None else getattr(tokenizer, "eos_token_id", None)
        head, tail = ([first] if first is not None else []), ([last] if last is not None else [])
        ids = head + body + tail
        mask = [1] * len(head) + [0] * len(body) + [1] * len(tail)
        offset = len(head)
    special = [k for k, m in enumerate(mask) if m]
    word_to_tokens = [[k + offset for k in ks] for ks in word_to_tokens]
    return EncodedWords(list(ids), word_to_tokens, special, text)


def single_token_id(tokenizer: Any, enc: EncodedWords, word_index: int) -> int | None:
    """The vocabulary id if word ``word_index`` is one in-vocabulary sub-token, else None."""
    positions = enc.word_to_tokens[word_index]
    if len(positions) != 1:
        return None
    tid = enc.input_ids[positions[0]]
    if tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id:
        return None
    return tid
