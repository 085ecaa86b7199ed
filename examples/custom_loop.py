"""A hand-written loop with collect/update: filter and relabel batches between the two.

Here, every batch keeps only episodes that ended by termination, and a small bonus is added
for short answers (relabelling rewards is just editing ``episode.rewards``).
"""

import gymnasium as gym

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_gpt2

if __name__ == "__main__":
    tokenizer = lmgym.ByteTokenizer()
    model = tiny_gpt2(tokenizer, n_layer=2, n_embd=64, n_positions=64)
    agent = PPOAgent(model, tokenizer=tokenizer, config=PPOConfig(learning_rate=1e-3))
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=8, tokenizer=tokenizer)
    for iteration in range(5):
        batch = agent.collect(envs, num_episodes=16)
        batch = batch.filter(lambda e: e.terminated)
        for episode in batch:
            episode.rewards[-1] += 0.1 * (episode.num_action_tokens <= 4)
        metrics = agent.update(batch)
        print(
            f"iteration {iteration}: return {metrics['env/return']:.3f}, "
            f"approx_kl {metrics['policy/approx_kl']:.4f}, loss {metrics['loss/total']:.4f}"
        )
