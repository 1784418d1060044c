from pathlib import Path

import numpy as np
import pytest

import gradflow as gf


GPL3 = Path("/usr/share/common-licenses/GPL-3")

ENGLISH = """
The river ran past the old mill, and the miller watched the water turn the
wheel. In the evening the children of the village came down to the bank to
see the fish jump. A heron stood in the reeds; it had stood there since the
morning, and it did not move when the boat went by. The boat carried flour to
the town on the hill, where the baker waited at the door of the shop.
"""


def test_builtin_corpus_word_level():
    corpus = gf.text.load()
    assert corpus.level == "word" and corpus.source == "builtin"
    assert len(corpus) > 10_000
    assert all(t == t.lower() for t in corpus.tokens[:1000])
    chain = gf.chains.from_text(None, vocab_size=30)
    assert chain.d == 30 and chain.tokens[0] == "the" and chain.tokens[-1] == "<other>"


@pytest.mark.skipif(not GPL3.exists(), reason="no /usr/share/common-licenses/GPL-3")
def test_held_out_english_file_puts_the_first():
    chain = gf.chains.from_text(GPL3, vocab_size=30)
    assert chain.tokens[0] == "the"
    assert "<other>" in chain.tokens and len(chain.tokens) == 30


def test_held_out_english_string_puts_the_first():
    chain = gf.chains.from_text(ENGLISH, vocab_size=5)
    assert chain.tokens[0] == "the" and chain.tokens[-1] == "<other>"


def test_vocabulary_order_and_bigram_estimate():
    text = "a b a c a b b a d"
    stream = gf.text.encode(text, vocab_size=3, smoothing=0.5)
    # counts: a 4, b 3, c 1, d 1 -> vocab (a, b, <other>); c and d map to <other>.
    assert stream.chain.tokens == ("a", "b", "<other>")
    np.testing.assert_array_equal(np.asarray(stream.ids), [0, 1, 0, 2, 0, 1, 1, 0, 2])
    counts = np.zeros((3, 3))
    ids = np.asarray(stream.ids)
    for i, j in zip(ids[:-1], ids[1:], strict=True):
        counts[i, j] += 1
    expected = (counts + 0.5) / (counts + 0.5).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(stream.chain.P), expected, rtol=1e-12)
    assert (np.asarray(stream.chain.P) > 0).all()


def test_pi_close_to_unigram_frequencies():
    stream = gf.text.encode(None, vocab_size=20, smoothing=0.01)
    freq = np.bincount(np.asarray(stream.ids), minlength=20) / len(stream)
    np.testing.assert_allclose(np.asarray(stream.chain.pi), freq, atol=2e-3)


def test_char_level_and_whitespace():
    assert gf.text.tokenize("ab  c\n\nd", "char") == ["a", "b", " ", "c", " ", "d"]
    chain = gf.chains.from_text(None, vocab_size=10, level="char")
    assert chain.tokens[0] == " " and chain.tokens[-1] == "<other>"


def test_word_tokenizer_drops_markup():
    words = gf.text.tokenize(" = = Title = = \n It was 1 @-@ 2 , don't ", "word")
    assert words == ["title", "it", "was", "1", "2", "don't"]


def test_folder_is_read_recursively(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("the cat", encoding="utf-8")
    (tmp_path / "sub" / "wiki.train.raw").write_text("the dog", encoding="utf-8")
    (tmp_path / "image.bin").write_bytes(b"\xff\xfe")  # ignored: not a text suffix
    corpus = gf.text.load(tmp_path)
    assert corpus.tokens == ("the", "cat", "the", "dog")


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no such file"):
        gf.text.load("/nonexistent/wiki.train.raw")
    with pytest.raises(FileNotFoundError, match="no such file"):
        gf.chains.from_text("missing_corpus.txt", vocab_size=5)


def test_non_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 the".encode("latin-1"))
    with pytest.raises(ValueError, match=r"not UTF-8 text: byte 0xe9 at offset 3"):
        gf.text.load(path)


def test_empty_and_too_small(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"path: the file .* is empty \(0 bytes\)"):
        gf.text.load(path)
    path.write_text(" \n\n ", encoding="utf-8")
    with pytest.raises(ValueError, match="too small: 0 word tokens"):
        gf.text.load(path)
    with pytest.raises(ValueError, match="too small: 1 word tokens"):
        gf.chains.from_text("hello", vocab_size=2)
    (tmp_path / "empty_folder").mkdir()
    with pytest.raises(ValueError, match="holds no text files"):
        gf.text.load(tmp_path / "empty_folder")


def test_bad_vocab_size_and_smoothing():
    with pytest.raises(ValueError, match="vocab_size must be >= 2.*got vocab_size = 1"):
        gf.chains.from_text(ENGLISH, vocab_size=1)
    with pytest.raises(
        ValueError, match=r"vocab_size = 500 is larger than the \d+ distinct"
    ):
        gf.chains.from_text(ENGLISH, vocab_size=500)
    with pytest.raises(TypeError, match="vocab_size must be an integer"):
        gf.chains.from_text(ENGLISH, vocab_size=3.5)
    with pytest.raises(
        ValueError, match="smoothing must be finite and > 0.*got smoothing = 0"
    ):
        gf.chains.from_text(ENGLISH, vocab_size=3, smoothing=0)
    with pytest.raises(ValueError, match="level must be one of.*'byte'"):
        gf.text.load(None, level="byte")


def test_cli_text_arguments(tmp_path):
    import argparse

    from gradflow._cli_sgd import add_text_arguments, chain_from_text_args

    parser = argparse.ArgumentParser()
    add_text_arguments(parser)
    assert chain_from_text_args(parser.parse_args([])) is None
    path = tmp_path / "t.txt"
    path.write_text(ENGLISH, encoding="utf-8")
    chain = chain_from_text_args(
        parser.parse_args(["--text", str(path), "--vocab-size", "4"])
    )
    assert chain.tokens[0] == "the" and chain.d == 4
    chain = chain_from_text_args(
        parser.parse_args(["--text", "builtin", "--level", "char"])
    )
    assert chain.d == 30 and chain.tokens[0] == " "
    with pytest.raises(FileNotFoundError, match="no such file"):
        chain_from_text_args(
            parser.parse_args(["--text", str(tmp_path / "missing.raw")])
        )


def test_long_one_line_string_is_text():
    # 460 characters: the filesystem says "File name too long"; it is text.
    text = "the cat sat " * 38 + "here"
    assert len(text) == 460
    chain = gf.chains.from_text(text, vocab_size=4)
    assert chain.tokens == ("the", "cat", "sat", "<other>")


def test_unreadable_file_is_a_value_error(tmp_path):
    import os

    path = tmp_path / "secret.txt"
    path.write_text("the cat sat on the mat", encoding="utf-8")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read any file")
        with pytest.raises(ValueError, match=r"path_or_text: '.*secret\.txt' cannot"):
            gf.chains.from_text(str(path), vocab_size=2)
    finally:
        path.chmod(0o644)
