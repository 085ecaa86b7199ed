"""Stable-Baselines3 trains an lmgym env with no LM at all, one token per step.

``TokenLevel`` turns the text env into Discrete(vocab) actions and a Box of recent token ids.
"""

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy

import lmgym  # noqa: F401  (registers the envs)
from lmgym.wrappers import TokenLevel


def make_env():
    return TokenLevel(gym.make("lmgym/Echo-v0", length=1, alphabet_size=2, max_action_tokens=1), context_tokens=16)


if __name__ == "__main__":
    model = PPO("MlpPolicy", make_env(), seed=0, n_steps=512, batch_size=128, learning_rate=3e-3, verbose=0)
    before, _ = evaluate_policy(model, make_env(), n_eval_episodes=100)
    model.learn(total_timesteps=12_000)
    after, _ = evaluate_policy(model, make_env(), n_eval_episodes=100)
    print(f"mean reward before {before:.2f}, after {after:.2f}")
