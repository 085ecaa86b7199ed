"""Small things the tests share: a tiny tokenizer and a tiny model built from a config."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel


class CharTokenizer:
    """A char-level tokenizer over a few characters (then EOS and PAD): a small action space."""

    def __init__(self, chars="abcdEcho: \n"):
        self.chars = list(dict.fromkeys(chars))
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.eos_token_id, self.pad_token_id = len(self.chars), len(self.chars) + 1
        self.vocab_size = len(self.chars) + 2

    def encode(self, text):
        return [self.index[c] for c in text if c in self.index]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids if i < len(self.chars))


def tiny_model(vocab_size, eos_token_id, seed=0, n_layer=2, n_embd=64, n_positions=128):
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        n_positions=n_positions,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
    )
    return GPT2LMHeadModel(config)


def registered_ids():
    """Every registered lmgym id whose library is installed (the task-library adapters need theirs)."""
    import gymnasium as gym

    from lmgym.compat import COMPAT, installed

    return sorted(i for i in gym.registry if i.startswith("lmgym/") and (i not in COMPAT or installed(COMPAT[i][3])))
