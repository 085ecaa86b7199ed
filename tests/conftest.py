import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
collect_ignore_glob = ["*/scripts/*"]  # run by tests under accelerate launch, not collected


@pytest.fixture(scope="session")
def hf_tokenizer_dir(tmp_path_factory):
    """A small word-level HF tokenizer built locally and saved (no hub access)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {"<eos>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    path = tmp_path_factory.mktemp("tokenizer")
    hf.save_pretrained(path)
    return str(path)
