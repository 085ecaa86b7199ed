"""Maze-v0: walk a small text grid to the goal, seeing only the cells around you."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from lmgym.core import LMEnv

MOVES = {"north": (-1, 0), "south": (1, 0), "west": (0, -1), "east": (0, 1)}


class MazeEnv(LMEnv):
    """Reach the goal ``G`` of a walled grid with moves ``north``/``south``/``east``/``west``.

    ## Description
    Each turn shows the 3x3 cells around you (``#`` wall, ``.`` free, ``@`` you, ``G`` goal;
    outside the grid counts as wall) and how far the goal is (row and column offsets). The
    first move word in the action is taken. After the LMRL-Gym maze tasks.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=8)``.

    ## Observation Space
    ``AnyText``: the partial view after every move.

    ## Starting State
    A ``size`` x ``size`` grid with walls at density ``wall_density``, a start and a goal
    with a path between them; all from the env's RNG.

    ## Rewards
    1.0 for reaching the goal; -0.01 per move into a wall or per unreadable action; else 0.

    ## Episode End
    Terminated at the goal; truncated by the ``TimeLimit`` of the registered id (40 turns).

    ## Arguments
    ``gym.make("lmgym/Maze-v0", size=6, wall_density=0.25, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 8

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        size: int = 6,
        wall_density: float = 0.25,
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if size < 3 or not 0 <= wall_density < 0.6:
            raise ValueError(f"need size >= 3 and 0 <= wall_density < 0.6, got {size}, {wall_density}")
        self.size, self.wall_density = size, wall_density
        self.walls = np.zeros((size, size), dtype=bool)
        self.pos = self.goal = (0, 0)

    def _path(self, start: tuple[int, int]) -> list[str]:
        """Moves of a shortest path from ``start`` to the goal (BFS); [] if none."""
        previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            if cell == self.goal:
                moves = []
                while previous[cell] is not None:
                    cell, move = previous[cell]  # type: ignore[misc]
                    moves.append(move)
                return moves[::-1]
            for move, (dr, dc) in MOVES.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self._free(nxt) and nxt not in previous:
                    previous[nxt] = (cell, move)
                    queue.append(nxt)
        return []

    def _free(self, cell: tuple[int, int]) -> bool:
        r, c = cell
        return 0 <= r < self.size and 0 <= c < self.size and not self.walls[r, c]

    def _view(self) -> str:
        rows = []
        for dr in (-1, 0, 1):
            row = ""
            for dc in (-1, 0, 1):
                cell = (self.pos[0] + dr, self.pos[1] + dc)
                row += "@" if (dr, dc) == (0, 0) else "G" if cell == self.goal else "." if self._free(cell) else "#"
            rows.append(row)
        dr, dc = self.goal[0] - self.pos[0], self.goal[1] - self.pos[1]
        return "\n".join(rows) + f"\ngoal: {dr:+d} rows, {dc:+d} cols\n"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        while True:
            self.walls = self.np_random.random((self.size, self.size)) < self.wall_density
            free = np.argwhere(~self.walls)
            if len(free) < 2:
                continue
            a, b = self.np_random.choice(len(free), size=2, replace=False)
            self.pos, self.goal = (int(free[a][0]), int(free[a][1])), (int(free[b][0]), int(free[b][1]))
            if self._path(self.pos):
                break
        return "Find the goal G. Move north, south, east or west.\n" + self._view(), {}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        words = [w.strip(".,!;:") for w in text.lower().split()]
        move = next((w for w in words if w in MOVES), None)
        if move is None:
            return "Move north, south, east or west.\n" + self._view(), -0.01, False, False, {"move": None}
        nxt = (self.pos[0] + MOVES[move][0], self.pos[1] + MOVES[move][1])
        if not self._free(nxt):
            return "A wall.\n" + self._view(), -0.01, False, False, {"move": move}
        self.pos = nxt
        if self.pos == self.goal:
            return "You reached the goal.\n", 1.0, True, False, {"move": move, "correct": True}
        return self._view(), 0.0, False, False, {"move": move}

    def oracle(self) -> str:
        path = self._path(self.pos)
        return path[0] if path else "north"  # at the goal already: any move
