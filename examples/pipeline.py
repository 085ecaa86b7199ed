"""A multi-call trajectory (trlx's open request): prompt_1 -> M -> F(out_1) -> M -> R(both).

The model names a letter, F asks it to repeat that letter twice, and R pays only when the
second call repeats the first one's letter: the reward depends on both calls, and PPOAgent
trains every token of both.
"""

import gymnasium as gym
import numpy as np

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_gpt2


def ask_twice(out_1: str) -> str:
    return f"\nTwice {out_1.strip()}:"


def reward(prompt: str, outputs: list[str], info: dict) -> float:
    letter = outputs[0].strip()
    return float(len(letter) == 1 and letter in "abc" and outputs[1].strip() == letter * 2)


if __name__ == "__main__":
    tokenizer = lmgym.ByteTokenizer()
    model = tiny_gpt2(tokenizer, n_layer=2, n_embd=64, n_positions=64)
    agent = PPOAgent(model, tokenizer=tokenizer, config=PPOConfig(learning_rate=1e-3, episodes_per_update=32))
    envs = gym.make_vec(
        "lmgym/Pipeline-v0",
        num_envs=16,
        tokenizer=tokenizer,
        max_action_tokens=3,
        prompts=["Letter:"],
        transforms=[ask_twice],
        reward_fn=reward,
    )
    batch = agent.collect(envs, 32)
    print(
        "turns per episode:",
        {len(e.rewards) for e in batch},
        "- both calls are trained:",
        all(e.action_mask.sum() > 0 and len(e.turn_ends) == 2 for e in batch),
    )
    agent.learn(envs, total_episodes=320)
    print(f"mean return after training: {np.mean(agent.collect(envs, 64).returns):.3f}")
