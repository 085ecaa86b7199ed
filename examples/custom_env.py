"""Train on your own env: a 20-line task written against the Gym API, trained with PPOAgent.

The task: say "yes" when the number in the prompt is even, "no" when it is odd.
"""

import gymnasium as gym
import numpy as np

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_gpt2


class ParityEnv(lmgym.LMEnv):
    """Answer "yes" if the number is even, else "no"."""

    max_action_tokens = 4

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.number = int(self.np_random.integers(100))
        return f"Is {self.number} even? ", {}

    def step_text(self, text):
        correct = text.strip() == ("yes" if self.number % 2 == 0 else "no")
        return "", float(correct), True, False, {"correct": correct}

    def oracle(self):
        return "yes" if self.number % 2 == 0 else "no"


gym.register("examples/Parity-v0", entry_point=ParityEnv, max_episode_steps=1)

if __name__ == "__main__":
    tokenizer = lmgym.ByteTokenizer()
    model = tiny_gpt2(tokenizer, n_layer=2, n_embd=64, n_positions=64)
    agent = PPOAgent(model, tokenizer=tokenizer, config=PPOConfig(learning_rate=1e-3, episodes_per_update=32))
    envs = gym.make_vec("examples/Parity-v0", num_envs=16, tokenizer=tokenizer)
    before = np.mean(agent.collect(envs, 64).returns)
    agent.learn(envs, total_episodes=320)
    after = np.mean(agent.collect(envs, 64).returns)
    print(f"mean return before {before:.3f}, after {after:.3f}")
