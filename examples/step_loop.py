"""The classic step-wise loop (TRL <= 0.11 style): you generate (through the agent's engine), you
score, ``agent.step`` trains (and syncs the engine to the new weights).

A tool result inside a response is masked (mask 0): it is context for the model, not trained,
and GAE carries the value across it.
"""

import torch

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_gpt2
from lmgym.tools import Calculator

if __name__ == "__main__":
    tok = lmgym.ByteTokenizer()
    model = tiny_gpt2(tok, n_layer=2, n_embd=64, n_positions=128)
    agent = PPOAgent(model, tokenizer=tok, config=PPOConfig(learning_rate=1e-3))
    calculator = Calculator()
    for iteration in range(3):
        queries, responses, masks, rewards = [], [], [], []
        for a, b in [(3, 4), (12, 5), (7, 8), (9, 9)]:
            query = tok.encode(f"What is {a} * {b}?\n")
            call = agent.engine.generate([query], ["</calc>"], max_new_tokens=12)[0]
            result = tok.encode(f"<result>{calculator(f'{a}*{b}')}</result>")
            answer = agent.engine.generate([query + call + result], ["</answer>"], max_new_tokens=12)[0]
            reward = float(tok.decode(answer).strip() == f"<answer>{a * b}</answer>")
            queries.append(torch.tensor(query))
            responses.append(torch.tensor(call + result + answer))
            masks.append(torch.tensor([1] * len(call) + [0] * len(result) + [1] * len(answer)))
            rewards.append(reward)
        metrics = agent.step(queries, responses, rewards, masks)
        print(f"step {iteration}: mean reward {metrics['env/return']:.2f}, loss {metrics['loss/total']:.4f}")
