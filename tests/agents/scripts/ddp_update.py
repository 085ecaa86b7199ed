"""Run under ``accelerate launch --num_processes 2 --cpu``: one collect + update per rank, then
each rank writes a checksum of its weights, which must agree."""

import sys

import gymnasium as gym
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import lmgym
from lmgym.agents import PPOAgent, PPOConfig

torch.manual_seed(0)
model = GPT2LMHeadModel(
    GPT2Config(vocab_size=258, n_embd=32, n_layer=1, n_head=2, n_positions=64, bos_token_id=256, eos_token_id=256)
)
agent = PPOAgent(model, tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(learning_rate=1e-2, mini_batch_size=4))
rank = agent.accelerator.process_index
batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=4)
before = [p.detach().clone() for p in agent.model.parameters()]
agent.update(batch)
changed = any(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters()))
checksum = sum(float(p.detach().double().sum()) for p in agent.model.parameters())
prompts = ",".join(str(e.seed) for e in batch)
with open(f"{sys.argv[1]}/rank{rank}.txt", "w") as f:
    f.write(f"{agent.accelerator.num_processes} {changed} {checksum!r} {prompts}\n")
agent.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()  # gloo threads left running at exit can abort a rank
