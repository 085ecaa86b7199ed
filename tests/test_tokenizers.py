import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmgym.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, as_tokenizer


@given(st.text())
def test_byte_roundtrip(text):
    tok = ByteTokenizer(["<calc>", "</calc>"])
    assert tok.decode(tok.encode(text)) == text


@given(st.lists(st.integers(0, 257)))
def test_byte_decode_never_raises(ids):
    assert isinstance(ByteTokenizer().decode(ids), str)


def test_byte_special_ids():
    tok = ByteTokenizer(["<a>", "<ab>"])
    assert (tok.vocab_size, tok.eos_token_id, tok.pad_token_id) == (260, 256, 257)
    assert tok.encode("<ab><a>x") == [259, 258, ord("x")]  # longest match first
    assert tok.decode([ord("h"), 256, 257, ord("i")]) == "hi"
    with pytest.raises(ValueError, match="300"):
        tok.decode([300])
    assert pickle.loads(pickle.dumps(tok)) == tok


def test_byte_save_load(tmp_path):
    tok = ByteTokenizer(["<x>"])
    tok.save_pretrained(tmp_path)
    assert as_tokenizer(str(tmp_path)) == tok


def test_hf_adapter(hf_tokenizer_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    tok = as_tokenizer(hf)
    assert isinstance(tok, HFTokenizer) and isinstance(tok, Tokenizer)
    ids = tok.encode("1+2")
    assert hf.eos_token_id not in ids and tok.decode(ids) == "1+2"
    assert tok.vocab_size == len(hf) and tok.eos_token_id == 0 and tok.pad_token_id == 1
    hf.add_tokens(["<calc>"])
    assert tok.vocab_size == len(hf)
    assert isinstance(as_tokenizer(hf_tokenizer_dir), HFTokenizer)


def test_as_tokenizer_passes_protocol_objects_and_rejects_others():
    tok = ByteTokenizer()
    assert as_tokenizer(tok) is tok
    assert as_tokenizer(None) == ByteTokenizer()
    with pytest.raises(TypeError, match="lacks"):
        as_tokenizer(object())
    with pytest.raises(ValueError, match="could not load a tokenizer"):
        as_tokenizer("/no/such/tokenizer/dir")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", ">", "é", "€", " ", [0xA9], [0xE2], [256]]), max_size=20),
    st.lists(st.text(alphabet="ab>é€ ", min_size=1, max_size=3), min_size=1, max_size=2),
)
def test_a_turn_ends_where_the_text_first_holds_a_stop_string(pieces, stops):
    """``action_length`` (which skips tokens ``may_end_turn`` rules out) ends a turn exactly where
    a brute-force decode of every prefix first holds a stop string (or at EOS)."""
    from lmgym.core import action_length

    tok = ByteTokenizer()
    ids = [i for p in pieces for i in (p if isinstance(p, list) else list(p.encode()))]
    first = next(
        (j + 1 for j in range(len(ids)) if ids[j] == 256 or any(s in tok.decode(ids[: j + 1]) for s in stops)), None
    )
    assert action_length(ids, tok, stops, 64) == first
