r"""Real text for gradflow: read local corpora (streamed, in bounded memory),
tokenise them (words, characters, or byte-level BPE trained on the corpus),
build bigram chains.

```python
import gradflow as gf
corpus = gf.text.load()                        # built-in: Python's doc topics
stream = gf.text.encode(corpus, vocab_size=30)  # ids + bigram chain
chain = gf.chains.from_text(None, vocab_size=512, level="bpe")
run = gf.train_sgd(stream, init_scale=1e-3, context=256, batch_size=512, lr=0.2)
```
"""

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
