"""Small things the tests share: a tiny tokenizer and a tiny model built from a config."""

import gymnasium as gym
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


def alive(pid):
    """Whether process ``pid`` runs (a zombie, waiting for its parent to reap it, runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def oracle_trace(envs, steps=6):
    """What a vector env returns, step by step, when every sub-env plays its oracle (seeds 10, 11, ...)."""
    import numpy as np

    tokenizer = envs.get_attr("tokenizer")[0]
    obs, infos = envs.reset(seed=list(range(10, 10 + envs.num_envs)))
    trace = [(list(obs), str(infos))]
    for _ in range(steps):
        oracles = envs.call("get_wrapper_attr", "oracle")
        actions = tuple(np.array(tokenizer.encode(oracle())[:128], dtype=np.int64) for oracle in oracles)
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        trace.append((list(obs), rewards.tolist(), terminated.tolist(), truncated.tolist(), str(infos)))
    return trace


OWN_TESTS = {
    "lmgym/TextWorld-v0",
    "lmgym/TextWorldExpress-v0",
    "lmgym/ScienceWorld-v0",
    "lmgym/SkyRL-v0",
    "lmgym/Verifiers-v0",
}
"""Adapters whose contract tests are their own (tests/compat/test_text_worlds.py and
tests/compat/test_verifiers_bridge.py):
a game compiled, a JVM or a harness process per env and seconds an episode, so the checks of 200
seeds here would take CI tens of minutes; Verifiers-v0 needs a user's taskset; TextWorld Express
draws its own gold path, so its oracle's path differs between runs of a seed (its games do not)."""


def registered_ids():
    """Every registered lmgym id whose library is installed (the task-library adapters need theirs)."""
    import gymnasium as gym

    from lmgym.compat import COMPAT, installed

    ids = (i for i in gym.registry if i.startswith("lmgym/") and i not in OWN_TESTS)
    return sorted(i for i in ids if i not in COMPAT or installed(COMPAT[i][3]))


FAMILIES = {
    "llama": {
        "config": "LlamaConfig",
        "special": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "eos": "<|eot_id|>",
        "pad": "<|end_of_text|>",
        "template": (
            "{{ '<|begin_of_text|>' }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
        ),
    },
    "qwen2": {
        "config": "Qwen2Config",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "template": (
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        ),
    },
    "mistral": {
        "config": "MistralConfig",
        "special": ["<s>", "</s>", "[INST]", "[/INST]"],
        "eos": "</s>",
        "pad": None,  # Mistral has none: lmgym pads with EOS
        "template": (
            "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
            "{% elif m['role'] == 'assistant' %}{{ m['content'] }}</s>{% endif %}{% endfor %}"
        ),
    },
}


def corpus():
    """A few hundred lines like the text the envs and the model exchange."""
    import lmgym  # noqa: F401 (registers the envs)

    env = gym.make("lmgym/Countdown-v0")
    lines = []
    for seed in range(300):
        prompt, _ = env.reset(seed=seed)
        lines += [prompt, env.get_wrapper_attr("oracle")(), "Answer with <answer>EXPR</answer>."]
    return lines


def build_chat_model(family, path, vocab_size=400, max_positions=1024):
    """A tiny model of ``family`` (2 layers, hidden 64) with a byte-level BPE tokenizer trained here
    and a chat template of its family, saved to ``path`` (offline)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=spec["special"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=spec["eos"],
        pad_token=spec["pad"],
        bos_token=spec["special"][0],
        additional_special_tokens=spec["special"],
    )
    hf.chat_template = spec["template"]
    config = getattr(transformers, spec["config"])(
        vocab_size=len(hf),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=hf.eos_token_id,
        bos_token_id=hf.bos_token_id,
        pad_token_id=hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    hf.save_pretrained(path)
    return path
