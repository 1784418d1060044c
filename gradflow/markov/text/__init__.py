"""Real text for gradflow: read local corpora (streamed, in bounded memory),
tokenise them (words, characters, or byte-level BPE trained on the corpus),
build bigram chains.

```python
import gradflow as gf
corpus = gf.text.load()                        # built-in: Python's doc topics
stream = gf.text.encode(corpus, vocab_size=30)  # ids + bigram chain
chain = gf.chains.from_text(None, vocab_size=512, level="bpe")
run = gf.train_sgd(stream, init_scale=1e-3, context=256, sgd=gf.SGD(0.2, 512))
```
"""

from ._bigram import TokenStream as TokenStream, bigram_counts as bigram_counts
from ._bpe import train_bpe as train_bpe
from ._checks import LEVELS as LEVELS, TAILS as TAILS
from ._corpus import (
    BUILTIN as BUILTIN,
    OTHER as OTHER,
    Corpus as Corpus,
    builtin_text as builtin_text,
    corpus_from_string as corpus_from_string,
    load as load,
    read_text as read_text,
)
from ._encode import encode as encode, from_text as from_text
from ._read import resolve_path as resolve_path
from ._units import tokenize as tokenize


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
