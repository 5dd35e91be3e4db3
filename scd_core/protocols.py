"""The contract between the decoding engine and a model.

The engine never imports a model library: everything model-specific (prompt templates,
unconditional rows for classifier-free guidance, forced tokens, cache cropping) lives
behind `TokenModel` and `Session`. `docs/models.md` shows a complete example.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import torch


@runtime_checkable
class Session(Protocol):
    """One batch of prompts being decoded.

    `first_logits` [B, V] predicts generated position 0 (guidance already applied).
    `step(tokens [B, W], start [B])` feeds `tokens[b, j]` at generated position
    `start[b] + j`, first forgetting anything fed earlier at positions >= start[b] of that
    row, and returns logits [B, W, V] where `logits[b, j]` predicts position
    `start[b] + j + 1`. One call is one forward pass. Return float32 logits (a model
    computing in bfloat16 casts them; the engine upcasts any other dtype itself).

    What the engine passes (docs/models.md, "What the engine guarantees"):
    - `start[b]` is never past what row b holds (the positions fed and not forgotten): no
      gap is ever left. It is usually smaller: after a rejection the row re-feeds from its
      last committed token, forgetting the rejected drafts; near the end of the grid the
      window is moved back to end at the last position, re-feeding committed tokens; and it
      may be smaller than the previous call's start (the window can grow between passes).
      Rows of a batch have their own starts.
    - No token is fed at a position past the grid (>= N, the grid's token count): the logits
      of a token at N - 1 predict a position past it and are never read (any values do).
    - Rows that have finished their grid stay in the batch while others decode, re-fed
      their last committed tokens, until the whole batch is done (or, when serving, until
      they leave through `keep_rows`).
    """

    first_logits: torch.Tensor

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor: ...


@runtime_checkable
class ResizableSession(Session, Protocol):
    """A Session whose batch can change between passes (optional; see `scd_core.serve`).

    `add_rows(prompts)` starts new rows after the existing ones (one forward pass over their
    prompts, with the session's guidance scale) and returns their first logits [b, V].
    `keep_rows(rows)` keeps only the rows listed, in that order; the others are forgotten.
    Neither may change what the kept rows' later logits are, and a failed `add_rows` leaves
    the session as it was. With both, requests join a running batch and leave it as soon as
    their grid is complete; without them, a server decodes one batch at a time.
    """

    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor: ...

    def keep_rows(self, rows: torch.LongTensor) -> None: ...


@runtime_checkable
class TreeSession(Session, Protocol):
    """A Session that can feed a tree of drafts in one pass (optional; needed for `tree=`).

    `step_tree(tokens [B, T], parents [B, T], start [B])` feeds T nodes per row in one
    forward pass, first forgetting anything fed earlier at positions >= start[b] of row b.
    Node 0 is the root (`parents[b, 0] == -1`); every other node j has a parent
    `0 <= parents[b, j] < j`. A node's depth is 0 for the root, else its parent's plus one,
    and node j sits at generated position `start[b] + depth(j)`: siblings share a position.
    Node j sees the committed prefix and its own root-to-j path only (a tree attention mask:
    its ancestors and itself). It returns logits [B, T, V] where `logits[b, j]` predicts
    position `start[b] + depth(j) + 1` given the prefix and that path: the logits `step`
    would give at the end of that path fed as a chain. A chain (`parents[b, j] == j - 1`)
    is exactly `step(tokens, start)`.

    `keep_path(nodes [B, P])` follows a `step_tree`: `nodes[b]` is a root-to-node path of
    that call's nodes (`nodes[b, 0] == 0`, each next one a child of the one before, padded
    with -1 at the end). Row b keeps node `nodes[b, i]` as position `start[b] + i` and
    forgets every other node of that call, without feeding anything: afterwards the session
    is exactly as if the path had been fed by `step`.

    What the engine passes with `tree=(k, depth)` (depth > 0, a drafting method), besides
    what `Session` says of `start`:
    - every pass is one `step_tree` followed by one `keep_path`, never `step`: also on the
      last pass, for rows that have finished (their path is the committed tokens they were
      re-fed), and when a pass's tree is only a chain (near the end of the grid, or a grid
      shorter than the window);
    - the nodes of a pass: T = L, the window, of which the tree is 1 + k + ... + k^depth
      nodes (the root, and k^d nodes at depth d), and the rest continues the first branch as
      a chain; the same parents for every row. (When the grid is shorter than that main
      line, every pass is the main line alone, a chain of at most N nodes.)
    - the node order: the main line first (node j at depth j for j < T - (k + ... + k^depth
      - depth): the root, the first branch of each tree level, then the chain), then level
      by level the other nodes of each tree level;
    - siblings may carry the same token: a row not fed a tree in this pass (near the end of
      the grid, or finished) and a position with fewer than k tokens to draft from get
      placeholder nodes repeating the main line's token at their depth. Their logits are
      never read, but they are nodes like any other (nothing may assume siblings differ).

    Optional: `reserve_tree(nodes: int)`, called by the engine before a run's first pass (and
    again before later passes: then it does nothing) with T, the nodes of its trees. A
    session that writes a tree's keys and values into slots reserved in its fixed-size
    cache (`scd_core.models.static`) makes room there, so that no pass allocates.
    """

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor: ...

    def keep_path(self, nodes: torch.LongTensor) -> None: ...


@runtime_checkable
class TokenModel(Protocol):
    """An autoregressive model over a grid of discrete tokens.

    `vocab_size` is V, the last dimension of the logits (the drafting vocabulary: random
    drafts are uniform over range(V)); `grid` is (H, W) for images or (T, H, W) for video.
    A model may also declare any of `OPTIONAL_ATTRIBUTES`; read them with `optional`.
    """

    vocab_size: int
    grid: tuple[int, ...]

    def start(self, prompts: Sequence[str], cfg_scale: float) -> Session: ...

    def decode(self, tokens: torch.LongTensor) -> list: ...


OPTIONAL_ATTRIBUTES: dict[str, str] = {
    "default_settings": "dict: the settings the model was made for (any of temperature, top_k, "
                        "top_p, cfg_scale, and window and init for drafting); the benchmark and "
                        "the app start from them",
    "example_prompts": "list[str]: prompts the model draws recognisably",
    "prompt_kind": "'text' (the default) or 'video': prompts are paths of clips to continue",
    "fps": "float: frames per second of decoded video",
    "vocab": "an object with known(prompt) -> list[str], the prompt words the model knows "
             "(for bag-of-words prompts)",
    "max_pass_bytes": "int: the most bytes one pass may hold (rows x window x vocabulary, "
                      "`scd_core.memory`); by default 4 GiB",
    "max_idle_bytes": "int: the most bytes of buffers kept between runs for the next sessions "
                      "(`scd_core.memory.idle_cap`); by default 4 GiB",
}


def optional(model: Any, name: str, default: Any = None) -> Any:
    """A model's optional attribute `name` (one of `OPTIONAL_ATTRIBUTES`), or `default`."""
    if name not in OPTIONAL_ATTRIBUTES:
        raise ValueError(f"name: {name!r} is not an optional model attribute; "
                         f"known: {', '.join(OPTIONAL_ATTRIBUTES)}")
    value = getattr(model, name, None)
    return default if value is None else value


def row_decoder(model: Any, session: Session, row: int):
    """How to decode row `row`'s tokens [1, N] of `session`: its `row_decoder(row)` where the
    model's decode needs per-row context (a video model decodes the frames it continued),
    else `model.decode`. Capture it when the row starts: row indices change as rows leave."""
    own = getattr(session, "row_decoder", None)
    return own(row) if callable(own) else model.decode


def can_resize(session: Session) -> bool:
    """Whether rows can join and leave the session's batch (`ResizableSession`)."""
    return callable(getattr(session, "add_rows", None)) and callable(getattr(session, "keep_rows", None))


def can_tree(session: Session) -> bool:
    """Whether the session can feed a tree of drafts in one pass (`TreeSession`)."""
    return callable(getattr(session, "step_tree", None)) and callable(getattr(session, "keep_path", None))
