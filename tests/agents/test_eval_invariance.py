"""Evaluations that do not depend on the batch: each held-out seed gets the same greedy reply
(and, sampled, the same sample) whether the evaluation plays 1, 7 or 50 envs at once, with the
LoRA adapters decoded merged or not; and evaluating leaves the training's RNG as it was."""

import gymnasium as gym
import pytest
import torch
from helpers import build_chat_model

import lmgym  # noqa: F401 (registers the envs)
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.evaluation import evaluate, transcript
from lmgym.wrappers import ChatTemplate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_chat_model("llama", tmp_path_factory.mktemp("llama"))
    config = PPOConfig(seed=0, model={"peft_config": {"r": 4}}, rollout={"max_new_tokens": 24})
    agent = PPOAgent(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), config=config)
    torch.manual_seed(1)
    with torch.no_grad():  # adapters that change the replies, as a trained run's do
        for name, p in agent.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return agent


def replies(agent, num_envs, episodes, **kwargs):
    envs = gym.make_vec("lmgym/Countdown-v0", num_envs=num_envs, tokenizer=agent.tokenizer, wrappers=[ChatTemplate])
    stats, batch = evaluate(agent, envs, episodes, **kwargs)
    envs.close()
    return [transcript(agent, e) for e in batch.episodes], stats


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "unmerged"])
def test_greedy_replies_do_not_depend_on_the_batch(agent, merged):
    agent.engine.merge_lora = merged
    rng = torch.get_rng_state()
    one, stats = replies(agent, 1, 50)
    assert torch.equal(torch.get_rng_state(), rng)  # evaluating left the training's RNG alone
    assert len(set(one)) > 10  # the replies differ by seed: the comparison below can fail
    for n in (7, 50):
        many, other = replies(agent, n, 50)
        assert many == one and other["success"] == stats["success"]


def test_merged_and_unmerged_decoding_give_the_same_greedy_replies(agent):
    agent.engine.merge_lora = True
    merged, _ = replies(agent, 7, 30)
    agent.engine.merge_lora = False
    assert replies(agent, 7, 30)[0] == merged


def test_sampled_evaluation_does_not_depend_on_the_batch(agent):
    agent.engine.merge_lora = True
    two, stats = replies(agent, 2, 20, samples=2)
    many, other = replies(agent, 8, 20, samples=2)
    assert two == many and stats["sampled"] == other["sampled"]
