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
    # 4.5 pseudo-counts against 8 bigrams: more than 10 % of all counts
    with pytest.warns(UserWarning, match=r"vocab_size = 3 is too large .*\(36 %"):
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


def test_auto_smoothing_is_one_percent_of_the_counts():
    # Add-one smoothing at d = 1024 puts 1,048,576 pseudo-counts on 65,649
    # bigrams: the chain is nearly uniform, and says so.
    corpus = gf.text.load()
    with pytest.warns(UserWarning, match=r"vocab_size = 1024 is too large"):
        laplace = gf.text.encode(corpus, 1024, smoothing=1)
    assert laplace.smoothing_fraction > 0.9 and laplace.pi_distance > 0.3
    auto = gf.text.encode(corpus, 1024)
    again = laplace.with_smoothing("auto")
    np.testing.assert_array_equal(np.asarray(again.chain.P), np.asarray(auto.chain.P))
    n = len(auto) - 1
    assert auto.smoothing == pytest.approx(0.01 / 0.99 * n / 1024**2, rel=1e-12)
    assert auto.smoothing_fraction == pytest.approx(0.01, rel=1e-9)
    counts = gf.text.bigram_counts(np.asarray(auto.ids), 1024) + auto.smoothing
    P = counts / counts.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(auto.chain.P), P, rtol=1e-12)
    freq = np.bincount(np.asarray(auto.ids), minlength=1024) / len(auto)
    distance = 0.5 * np.abs(np.asarray(auto.chain.pi) - freq).sum()
    assert auto.pi_distance == pytest.approx(distance, rel=1e-9)
    assert auto.pi_distance < 0.02
    assert auto.chain.tokens[0] == "the" and auto.chain.pi[0] > 0.06
    assert "1 % of the counts" in repr(auto)
    with pytest.raises(ValueError, match="smoothing must be 'auto' or a number"):
        gf.text.encode(corpus, 10, smoothing="laplace")


def test_pi_close_to_unigram_frequencies():
    stream = gf.text.encode(None, vocab_size=20, smoothing=0.01)
    freq = np.bincount(np.asarray(stream.ids), minlength=20) / len(stream)
    np.testing.assert_allclose(np.asarray(stream.chain.pi), freq, atol=2e-3)
    # the reported distance (its frequencies read off the bigram counts) is
    # the one from the stream's own unigram counts, exactly
    distance = 0.5 * float(np.abs(np.asarray(stream.chain.pi) - freq).sum())
    assert stream.pi_distance == distance


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


# One step of SGD on the chain the text flags make (width 1, context 1):
# the chain is read back from the run the command writes.
_ONE_STEP = "sgd --width 1 --context 1 --batch-size 1 --t1 0.2 --no-progress".split()


def _cli_chain(tmp_path, *flags):
    from gradflow.cli import main

    out = tmp_path / "out"  # (each call replaces the last: --overwrite)
    assert main([*_ONE_STEP, *flags, "--out", str(out), "--overwrite"]) == 0
    return gf.load_sgd(out / "sgd_run.npz").problem


def test_cli_text_arguments(tmp_path, capsys):
    from gradflow.cli import main

    path = tmp_path / "t.txt"
    path.write_text(ENGLISH, encoding="utf-8")
    problem = _cli_chain(tmp_path, "--text", str(path), "--vocab-size", "4")
    assert problem.chain.tokens[0] == "the" and problem.chain.d == 4
    assert problem.model == gf.Model()  # no model flags: the paper's model
    assert main([*_ONE_STEP, "--text", str(tmp_path / "missing.raw")]) == 2
    assert "--text: no such file" in capsys.readouterr().err


@pytest.mark.slow  # two runs of SGD, each compiled (about 10 s)
def test_cli_text_levels_and_tail(tmp_path):
    chain = _cli_chain(tmp_path, "--text", "builtin", "--level", "char").chain
    assert chain.d == 30 and chain.tokens[0] == " "
    path = tmp_path / "t.txt"
    path.write_text(ENGLISH, encoding="utf-8")
    args = ["--text", str(path), "--vocab-size", "40", "--level", "bpe"]
    chain = _cli_chain(tmp_path, *args, "--tail", "drop").chain
    assert chain.d == 40 and "<other>" not in chain.tokens and " the" in chain.tokens


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


# ------------------------------------------------------------------ streaming
def _reference(text, level, vocab_size):
    """Today's whole-text path: tokenise with `re`, count, most_common."""
    from collections import Counter

    tokens = gf.text.tokenize(text, level)
    vocab = [t for t, _ in Counter(tokens).most_common(vocab_size - 1)]
    index = {t: k for k, t in enumerate(vocab)}
    ids = np.array([index.get(t, len(vocab)) for t in tokens])
    return (*vocab, "<other>"), ids


@pytest.mark.parametrize("level", ["word", "char"])
@pytest.mark.parametrize("block", [13, 1000, 4 << 20])
def test_streaming_matches_whole_text_reference(tmp_path, level, block):
    # Blocks of 13 bytes cut the text almost everywhere: the pieces must still
    # join into exactly the tokens of the whole text (words, whitespace runs,
    # UTF-8 sequences, the blank line that joins the files of a folder).
    parts = [
        ENGLISH,
        "Ünïcode wörds: naïve café, don't split — “quoted” ΣΟΦΊΑ σοφός\n\n\n",
        "  tabs\tand   spaces\n" * 3,
    ]
    for k, part in enumerate(parts):
        (tmp_path / f"{k}.txt").write_text(part, encoding="utf-8")
    text = "\n\n".join(parts)
    vocab, ids = _reference(text, level, 12)
    corpus = gf.text.load(tmp_path, level, block_bytes=block)
    stream = gf.text.encode(corpus, 12, level=level)
    assert stream.chain.tokens == vocab
    np.testing.assert_array_equal(np.asarray(stream.ids), ids)
    assert corpus.tokens == tuple(gf.text.tokenize(text, level))


def test_builtin_streaming_matches_reference():
    text = gf.text.builtin_text()
    vocab, ids = _reference(text, "word", 64)
    stream = gf.text.encode(None, 64)
    assert stream.chain.tokens == vocab
    np.testing.assert_array_equal(np.asarray(stream.ids), ids)


def test_ids_use_the_smallest_integer_type():
    assert gf.text.encode(None, 256).ids.dtype == np.uint8
    assert gf.text.encode(None, 257).ids.dtype == np.uint16


def test_non_utf8_offset_in_a_later_block(tmp_path):
    path = tmp_path / "late.txt"
    path.write_bytes(("the cat sat " * 20).encode() + b"caf\xe9 " + b"ok " * 30)
    with pytest.raises(ValueError, match=r"byte 0xe9 at offset 243 cannot"):
        gf.text.load(path, block_bytes=64)
    path.write_bytes(("the cat sat " * 20).encode() + b"\x00 tail")
    with pytest.raises(
        ValueError, match=r"binary file, not text \(a NUL byte at offset 240"
    ):
        gf.text.load(path, block_bytes=64)
    with pytest.raises(
        ValueError, match="block_bytes must be >= 1, got block_bytes = 0"
    ):
        gf.text.load(path, block_bytes=0)


def test_tail_drop_removes_the_rest_from_the_stream():
    text = "a b a c a b b a d"
    stream = gf.text.encode(text, vocab_size=2, tail="drop", smoothing=0.01)
    assert stream.chain.tokens == ("a", "b")
    np.testing.assert_array_equal(np.asarray(stream.ids), [0, 1, 0, 0, 1, 1, 0])
    counts = gf.text.bigram_counts(np.asarray(stream.ids), 2)
    np.testing.assert_array_equal(counts, [[1, 2], [2, 1]])
    # pi of a dropped-tail chain is close to the frequencies of the kept tokens
    other = gf.text.encode(None, 20, smoothing=0.01)
    drop = gf.text.encode(None, 20, smoothing=0.01, tail="drop")
    assert drop.chain.tokens == other.chain.tokens[:-1] + (drop.chain.tokens[-1],)
    freq = np.bincount(np.asarray(drop.ids), minlength=20) / len(drop)
    np.testing.assert_allclose(np.asarray(drop.chain.pi), freq, atol=2e-3)
    with pytest.raises(ValueError, match=r"tail must be one of \('other', 'drop'\)"):
        gf.text.encode(text, 2, tail="keep")


def test_cache_is_a_memory_map_reused(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(ENGLISH, encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    plain = gf.text.encode(corpus, 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    cache = tmp_path / "ids.npy"
    first = gf.text.encode(corpus, 6, cache=cache)
    assert isinstance(first.ids, np.memmap) and first.ids.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(first.ids), np.asarray(plain.ids))
    again = gf.text.encode(corpus, 6, cache=cache)
    assert again.chain.tokens == plain.chain.tokens
    np.testing.assert_allclose(np.asarray(again.chain.P), np.asarray(plain.chain.P))
    other = gf.text.encode(corpus, 7, cache=cache)  # other settings: rewritten
    assert other.d == 7
    with pytest.raises(ValueError, match="cache must be a file path ending in .npy"):
        gf.text.encode(corpus, 6, cache=tmp_path / "ids.bin")


# ------------------------------------------------------------------------ BPE
def test_bpe_builtin_vocabulary():
    stream = gf.text.encode(None, 300, level="bpe")
    chain = stream.chain
    assert chain.d == 300 and chain.tokens[-1] == "<other>"
    assert " the" in chain.tokens and " " in chain.tokens
    # with tail="drop" all 300 learnt tokens are kept: nothing is removed
    drop = gf.text.encode(None, 300, level="bpe", tail="drop")
    assert drop.d == 300 and "<other>" not in drop.chain.tokens
    assert len(drop) == len(stream)
    assert np.all(np.asarray(chain.P) > 0)


def test_bpe_round_trip_small_text():
    # The learnt tokens spell the text back exactly (byte-level: no unknowns).
    text = ENGLISH * 3
    corpus = gf.text.corpus_from_string(text, "bpe")
    assert "".join(corpus.tokens) == text
    assert gf.text.train_bpe(corpus, 50).get_vocab_size() == 50
    stream = gf.text.encode(text, 50, level="bpe", tail="drop")
    labels = stream.chain.tokens
    assert "".join(labels[i] for i in np.asarray(stream.ids)) == text
