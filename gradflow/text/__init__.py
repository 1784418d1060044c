"""Real text for the paper's model (`gradflow.markov.text`), at its public
path `gradflow.text`: local corpora read in bounded memory, tokenised by
word, character or byte-level BPE, and their bigram chains."""

from ..markov.text import (
    BUILTIN as BUILTIN,
    LEVELS as LEVELS,
    OTHER as OTHER,
    TAILS as TAILS,
    Corpus as Corpus,
    TokenStream as TokenStream,
    bigram_counts as bigram_counts,
    builtin_text as builtin_text,
    corpus_from_string as corpus_from_string,
    encode as encode,
    from_text as from_text,
    load as load,
    read_text as read_text,
    resolve_path as resolve_path,
    tokenize as tokenize,
    train_bpe as train_bpe,
)


__all__ = [
    "BUILTIN",
    "Corpus",
    "LEVELS",
    "OTHER",
    "TAILS",
    "TokenStream",
    "bigram_counts",
    "builtin_text",
    "corpus_from_string",
    "encode",
    "from_text",
    "load",
    "read_text",
    "resolve_path",
    "tokenize",
    "train_bpe",
]
