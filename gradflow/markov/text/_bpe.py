"""Byte-level BPE: a Hugging Face `tokenizers` BPE trained on the pieces of a
corpus (each as often as it occurs, without re-reading the text), the text of
its tokens, and the token ids of every distinct piece. Nothing is downloaded.
"""

from collections.abc import Iterator

import numpy as np

from ._corpus import Corpus


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-character map (used by byte-level BPE), inverted."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE())
    # The pieces are made by `_bpe_units`; NUL (never in accepted text)
    # separates them in the training feed, and ByteLevel maps bytes to symbols.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\x00", "removed"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _bpe_feed(corpus: Corpus, block_chars: int = 1 << 16) -> Iterator[str]:
    """Every piece as often as it occurs (NUL-separated, in strings of about
    `block_chars` characters): the trainer counts the same pieces the corpus
    holds, without re-reading it. The strings are kept short because
    `train_from_iterator` buffers a few hundred of them at a time: with 4 MiB
    strings that buffer was about 1.5 GB (peak RSS 1,983 MiB training on a
    100 MB file, 499 MiB with 64 KiB strings; the same merges, the same time)."""
    batch, size = [], 0
    for piece, count in zip(corpus.units, corpus.unit_counts.tolist(), strict=True):
        unit = piece + "\x00"
        per = max(1, block_chars // len(unit))
        while count > 0:
            k = min(count, per)
            batch.append(unit * k)
            size += k * len(unit)
            count -= k
            if size >= block_chars:
                yield "".join(batch)
                batch, size = [], 0
    if batch:
        yield "".join(batch)


def train_bpe(corpus: Corpus, vocab_size: int):
    """A byte-level BPE tokenizer (Hugging Face `tokenizers`) trained on the
    pieces of `corpus` to `vocab_size` tokens: its alphabet is the bytes the
    corpus uses, then the most frequent merges. Nothing is downloaded."""
    from tokenizers import trainers

    tokenizer = _bpe_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), show_progress=False)
    tokenizer.train_from_iterator(_bpe_feed(corpus), trainer=trainer)
    return tokenizer


def bpe_labels(tokenizer) -> list[str]:
    """Each BPE token as text (bytes that are not whole UTF-8 characters as
    `\\xNN` escapes)."""
    decode = _byte_decoder()
    labels = [""] * tokenizer.get_vocab_size()
    for symbol, k in tokenizer.get_vocab().items():
        raw = bytes(decode[c] for c in symbol)
        labels[k] = raw.decode("utf-8", "backslashreplace")
    return labels


def bpe_sequences(corpus: Corpus, tokenizer):
    """The BPE token ids of every distinct piece: (flat ids, lengths)."""
    flat, lengths = [], []
    units = list(corpus.units)
    for a in range(0, len(units), 1 << 16):
        for e in tokenizer.encode_batch(
            units[a : a + (1 << 16)], add_special_tokens=False
        ):
            flat.extend(e.ids)
            lengths.append(len(e.ids))
    return np.asarray(flat, np.int64), np.asarray(lengths, np.int64)
