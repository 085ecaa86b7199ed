"""Run under ``torchrun --nproc_per_node 2`` (FSDP2, gloo) or as one process: one PPO update
(``step``) of a tiny Llama on a fixed batch, the same on every rank; rank 0 writes the full
weights to ``OUT/weights.pt``, which must match one process's."""

import sys

import torch

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_llama

torch.set_num_threads(1)  # as torchrun sets each rank: the same reduction order in every matmul
tokenizer = lmgym.ByteTokenizer()
torch.manual_seed(0)
model = tiny_llama(tokenizer, n_layer=2, n_embd=32, n_head=2, n_positions=64)
config = PPOConfig(learning_rate=1e-3, mini_batch_size=4, n_epochs=2, model={"fsdp": True}, kl_coef=0.0)
agent = PPOAgent(model, tokenizer=tokenizer, config=config)
generator = torch.Generator().manual_seed(1)  # the same batch on every rank
queries = [torch.randint(0, 256, (6,), generator=generator) for _ in range(4)]
responses = [torch.randint(0, 256, (5,), generator=generator) for _ in range(4)]


def full_state():
    return {
        n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for n, p in agent.policy.named_parameters()
    }


before = full_state()
agent.step(queries, responses, [1.0, 0.0, 0.5, 0.2])
state = full_state()
moved = max((state[n] - before[n]).abs().max().item() for n in state)
if agent.accelerator.is_main_process:
    kind = type(agent.policy).__name__
    torch.save(
        {"world": agent.accelerator.num_processes, "state": state, "type": kind, "moved": moved},
        f"{sys.argv[1]}/weights.pt",
    )
if agent.accelerator.num_processes > 1:
    agent.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()
