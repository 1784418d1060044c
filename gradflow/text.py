"""Real text for gradflow: read local corpora, tokenise, build bigram chains.

```python
import gradflow as gf
corpus = gf.text.load()                        # built-in: Python's doc topics
stream = gf.text.encode(corpus, vocab_size=30)  # ids + bigram chain
run = gf.train_sgd(stream, init_scale=1e-3, context=256, batch_size=512, lr=0.2)
```
"""

from ._text import (
    BUILTIN as BUILTIN,
    LEVELS as LEVELS,
    OTHER as OTHER,
    Corpus as Corpus,
    TokenStream as TokenStream,
    builtin_text as builtin_text,
    corpus_from_string as corpus_from_string,
    encode as encode,
    from_text as from_text,
    load as load,
    read_text as read_text,
    tokenize as tokenize,
)


__all__ = [
    "BUILTIN",
    "Corpus",
    "LEVELS",
    "OTHER",
    "TokenStream",
    "builtin_text",
    "corpus_from_string",
    "encode",
    "from_text",
    "load",
    "read_text",
    "tokenize",
]
