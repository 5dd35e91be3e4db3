"""Any decoder-only transformers model behind the TokenModel contract, no adapter needed.

`CausalSession` runs the model's own forward (`model(input_ids, attention_mask, position_ids,
cache)`, its language-model head included) on a KV cache of fixed size written by position
(`transformers_session.SlotCache`: an explicit 4-D mask and position ids per call), so rows
at different positions share one batched pass and forgetting rejected drafts is masking.
Around the forward it does what transformers' own loop does to the scores, position by
position:

- classifier-free guidance as `UnbatchedClassifierFreeGuidanceLogitsProcessor` does it: the
  unconditional rows (the negative prompt, or the prompt's last token) are fed the same tokens
  in the same forward, and the scores mixed as `u + s (c - u)` on log-softmax scores;
- every other processor on the logits of window position j, given the prefix that position
  conditions on: the prompt as transformers has it (left padding included), then the tokens
  fed before it, the committed ones and the drafts (`_process`).

`SessionTokenModel` is the TokenModel that hands the engine such a session (over
`max_new_tokens` positions: its grid is one row, (1, N)).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from scd_core.models.checks import check_step, left_pad
from scd_core.models.transformers_session import SlotCache
from scd_core.sampling import guide


def prompt_rows(ids: torch.Tensor, mask: torch.Tensor | None, name: str) -> list[list[int]]:
    """The tokens of each row of left-padded ids [B, P] (mask [B, P], None: no padding); a
    ValueError names `name` for padding that is not on the left, or a row with no token."""
    if mask is None:
        return ids.tolist()
    mask = mask.bool()
    if bool((mask[:, :-1] & ~mask[:, 1:]).any()) or not bool(mask[:, -1].all()):
        raise ValueError(f"{name}: rows must be left-padded (padding first, then every token attended)")
    return [row[m].tolist() for row, m in zip(ids, mask)]


class CausalSession:
    """B prompts (and their B unconditional rows under guidance), prefilled in one forward;
    `step` feeds windows. Rows are laid out as `reps` blocks of B: the prompts, then the
    unconditional rows."""

    def __init__(self, model, prompt_ids: torch.Tensor, rows: list[list[int]], batch: int, N: int,
                 guidance_scale: float | None, processors: Sequence, pad_token_id: int):
        self.model, self.batch, self.N = model, batch, N
        self.reps = len(rows) // batch
        self.guidance_scale = guidance_scale
        self.processors = list(processors)
        self.device = prompt_ids.device
        self.prompt_ids = prompt_ids                     # [B, P0] as transformers' processors see them
        ids, mask = left_pad(rows, pad_token_id, self.device)
        text = model.config.get_text_config()
        self.kv = SlotCache(text.num_hidden_layers, mask.sum(1), ids.shape[1], N)
        self.fed = torch.zeros(batch, dtype=torch.long, device=self.device)     # positions each row holds
        self.fed_tokens = torch.full((batch, N), pad_token_id, dtype=torch.long, device=self.device)
        with torch.no_grad():
            logits = self._forward(ids, *self.kv.prefill(model.dtype))[:, -1:]  # [R, 1, V]
            self.first_logits = self._process(self._guided(logits), self.fed - 1)[:, 0]
        self.vocab_size = int(self.first_logits.shape[-1])

    def allowed_at_start(self) -> torch.LongTensor | None:
        """The tokens the processors leave a score at the first generated position of some row
        [M] (None: every token, or no processors). Fresh drafts are drawn from them
        (`Plan.draft_vocab`): exact for any set, and where the processors restrict the
        vocabulary (Emu3's visual codes) they are the drafts that can be accepted."""
        if not self.processors:
            return None
        allowed = (self.first_logits > -torch.inf).any(0)                     # [V]
        return None if bool(allowed.all()) else allowed.nonzero().squeeze(1)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, cache=self.kv.cache,
                         use_cache=True)
        return out.logits

    def _guided(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of all rows [R, W, V] -> the scores of the B prompts [B, W, V] (float32),
        guided as transformers' unbatched guidance does it (log-softmax scores, the
        unconditional ones in the model's dtype)."""
        cond = logits[: self.batch].float()
        if self.reps == 1:
            return cond
        uncond = logits[self.batch:].log_softmax(-1)
        return guide(cond.log_softmax(-1), uncond, self.guidance_scale)

    def _process(self, scores: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """The processors on scores [B, W, V] whose position j of row b predicts position
        start[b] + j + 1: each sees that position's prefix, the prompt then the tokens fed at
        positions 0 .. start[b] + j. One call of the whole batch per prefix length (so batch
        indices stay those of the prompts), each row at its window position of that length;
        a row with none there is processed too and discarded. A host loop, run only when there
        are processors, after one read-back of the rows' starts."""
        if not self.processors:
            return scores
        B, W = scores.shape[:2]
        rows = torch.arange(B, device=scores.device)
        out = scores.clone()
        first, last = (int(v) for v in torch.stack([start.min(), start.max()]).tolist())
        for length in range(first + 1, last + W + 1):                    # generated tokens in the prefix
            j = length - 1 - start                                       # [B] each row's window position
            here = (j >= 0) & (j < W)
            j = j.clamp(0, W - 1)
            ids = torch.cat([self.prompt_ids, self.fed_tokens[:, :length]], 1)
            s = scores[rows, j]                                          # [B, V]
            for proc in self.processors:
                s = proc(ids, s)
            out[rows[here], j[here]] = s[here].to(out.dtype)
        return out

    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        tokens, start = check_step(tokens, start, self.batch, self.vocab_size, device=self.device, fed=self.fed,
                                   length=self.N)
        offsets = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)   # [B, W]
        self.fed_tokens.scatter_(1, offsets, tokens)
        mask, position_ids = self.kv.write_at(offsets.repeat(self.reps, 1), self.model.dtype)
        logits = self._forward(tokens.repeat(self.reps, 1), mask, position_ids)          # [R, W, V]
        self.fed = start + tokens.shape[1]
        return self._process(self._guided(logits), start)


class SessionTokenModel:
    """A TokenModel over a session already started (transformers' prompts are ids, already in
    it): `start` hands the engine that session, a `CausalSession` over N = max_new_tokens
    positions (grid (1, N)), or an adapter's session."""

    def __init__(self, session, vocab_size: int, grid: tuple[int, ...], decode=None):
        self.session, self.vocab_size, self.grid = session, int(vocab_size), tuple(grid)
        self._decode = decode

    def start(self, prompts: Sequence[str], cfg_scale: float):
        return self.session

    def decode(self, tokens: torch.LongTensor) -> list:
        return self._decode(tokens) if self._decode is not None else list(tokens)
