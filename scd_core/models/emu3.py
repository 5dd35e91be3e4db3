"""Emu3-Gen behind the TokenModel contract, on transformers' Emu3ForConditionalGeneration.

Emu3 writes an image as rows of BPE visual tokens, each row closed by a forced end-of-line
token (`<|extra_200|>`), after a header `<|image start|>H*W<|image token|>`. The engine sees
only the H x W grid of visual codes (V = the VQ codebook size); the adapter
- maps codes to BPE ids and back (`model.vocabulary_mapping.img2bpe`),
- inserts the end-of-line token after every last-of-row code it feeds, and reads the logits
  of the next row's first code from that end-of-line token,
- restricts logits to the visual tokens (as `generate` does with `prefix_allowed_tokens_fn`):
  the head's rows of the visual codes are taken once, at load, so a pass computes K logits,
  not the whole 184,622-token vocabulary's,
- runs classifier-free guidance with a negative prompt in the same batched forward: the
  cond and negative rows have different lengths, so prompts are left-padded and every call
  passes explicit `position_ids` and a 4-D attention mask over a KV cache of fixed size
  written by position (`transformers_session.SlotCache`). Guidance is
  `u + (c - u) * cfg_scale` on the visual logits, which equals transformers' unbatched
  log-softmax guidance restricted to the visual tokens up to a per-row constant;
- rows joining (`add_rows`) and leaving (`keep_rows`) a running session: the cache keeps the
  prompt rows of all prompts, then their negative-prompt rows (`transformers_session.SlotCache.join` / `select`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from .checkpoints import config_model_type, pick_device_dtype, resolve_weights
from .checks import check_cfg, check_prompts, check_tokens
from .transformers_session import RowEnds, RowEndsSession, head_rows, load_pretrained
from .hub import HubFiles, ProgressFn
from .tree import Forced, Tree

# The transformers port (Emu3ForConditionalGeneration); BAAI/Emu3-Gen itself needs remote code.
HUB_FILES = {"emu3-gen": HubFiles.transformers("BAAI/Emu3-Gen-hf", approx_gb=17.0)}
HUB_IDS = {name: files.repo_id for name, files in HUB_FILES.items()}
DEFAULT_SETTINGS = {"cfg_scale": 3.0, "top_k": 2048, "top_p": 1.0, "temperature": 1.0, "window": 32}
EOL_TOKEN = "<|extra_200|>"
# The sampling defaults of the Emu3 release (BAAI/Emu3 image_generation.py).
POSITIVE_SUFFIX = " masterpiece, film grained, best quality."
NEGATIVE_PROMPT = ("lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, "
                   "fewer digits, cropped, worst quality, low quality, normal quality, jpeg "
                   "artifacts, signature, watermark, username, blurry.")


def hub_files(name: str) -> tuple[HubFiles, ...]:
    return (HUB_FILES[name],)


def gpu_reason(name: str) -> str | None:
    return "8B parameters, 8,100 tokens per image"


def claims_folder(path: str) -> bool:
    return config_model_type(path) == "emu3"


def load_emu3(name_or_path: str, device: str | torch.device | None = None,
              dtype: str | torch.dtype | None = None, image_area: int | None = None,
              ratio: str = "1:1", *, local_files_only: bool = False, progress: ProgressFn | None = None,
              **kwargs) -> "Emu3TokenModel":
    """Load Emu3-Gen from a registry name (downloaded on first use), a Hub id or a folder.

    `image_area` (pixels, processor default 518400 = 720x720 -> 90x90 codes) and `ratio`
    ("W:H") set the token grid; smaller areas make much shorter runs.
    """
    folder = resolve_weights(name_or_path, HUB_FILES.get(name_or_path), local_files_only=local_files_only,
                             progress=progress)
    dev, dt = pick_device_dtype(device, dtype)
    from transformers import Emu3ForConditionalGeneration, Emu3Processor

    model, processor = load_pretrained(folder, Emu3ForConditionalGeneration, Emu3Processor, dev, dt, "Emu3")
    return Emu3TokenModel(model, processor, image_area=image_area, ratio=ratio,
                          name=name_or_path, **kwargs)


class Emu3TokenModel:
    """An `Emu3ForConditionalGeneration` as a TokenModel over its visual-code grid.

    With a `processor` (an `Emu3Processor`), prompts get the image header from
    `processor(..., return_for_image_generation=True)` and the grid from `image_area`/`ratio`.
    Tests and custom setups may instead pass `encode(text) -> list[int]` (full ids, header
    included) together with `grid=(H, W)`.
    """

    def __init__(self, model, processor=None, *, encode: Callable[[str], list[int]] | None = None,
                 grid: tuple[int, int] | None = None, image_area: int | None = None,
                 ratio: str = "1:1", negative_prompt: str = NEGATIVE_PROMPT,
                 positive_suffix: str = POSITIVE_SUFFIX, pad_token_id: int | None = None,
                 name: str = "emu3"):
        if processor is None and (encode is None or grid is None):
            raise ValueError("processor: pass an Emu3Processor, or both `encode` and `grid`")
        self.model, self.processor, self.name = model, processor, name
        self._encode, self.ratio = encode, _check_ratio(ratio)
        self.image_area = _check_area(image_area)
        self.negative_prompt, self.positive_suffix = negative_prompt, positive_suffix
        self.grid = tuple(int(x) for x in (grid or self._grid_from_processor()))
        if len(self.grid) != 2 or min(self.grid) < 1:
            raise ValueError(f"grid: expected (H, W) with positive sizes, got {self.grid!r} "
                             "(is image_area too small?)")
        mapping = model.vocabulary_mapping
        self.eol_token_id = int(mapping.eol_token_id)
        img2bpe = mapping.img2bpe
        self.vocab_size = len(img2bpe)
        if sorted(img2bpe) != list(range(self.vocab_size)):
            raise ValueError("model: visual token codes are not 0..K-1")
        bpe = [img2bpe[i] for i in range(self.vocab_size)]
        self.code_to_bpe = torch.tensor(bpe, dtype=torch.long, device=self.device)
        # The head's rows of the visual codes, taken once (a view where their BPE ids run in
        # order): a pass computes K logits, not the whole vocabulary's.
        head = model.lm_head
        self.image_head = head_rows(head.weight, bpe)                                    # [K, hidden]
        self.image_bias = None if head.bias is None else head_rows(head.bias[:, None], bpe)[:, 0]
        text_pad = model.config.text_config.pad_token_id
        self.pad_token_id = int(pad_token_id if pad_token_id is not None else (text_pad or 0))
        self.layout = RowEnds(self.grid[1], self.eol_token_id, self.pad_token_id)
        self.default_settings = dict(DEFAULT_SETTINGS)

    def _grid_from_processor(self) -> tuple[int, int]:
        proc = self.processor
        area = self.image_area or getattr(proc, "image_area", None) or 518400
        return proc.calculate_generate_size(self.ratio, area, proc.downsample_ratio)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of `text` followed by the image header `<|image start|>H*W<|image token|>`."""
        if self._encode is not None:
            return list(self._encode(text))
        kwargs = {"ratio": self.ratio}
        if self.image_area:
            kwargs["image_area"] = self.image_area
        out = self.processor(text=[text], return_for_image_generation=True, return_tensors="pt", **kwargs)
        if [int(x) for x in out["image_sizes"][0]] != list(self.grid):
            raise ValueError("processor: image size disagrees with the model's grid")
        return out["input_ids"][0].tolist()

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "Emu3Session":
        prompts = check_prompts(prompts)
        cfg_scale = check_cfg(cfg_scale)
        rows = [self.encode_prompt(p + self.positive_suffix) for p in prompts]
        if cfg_scale != 1.0:
            rows += [self.encode_prompt(self.negative_prompt)] * len(prompts)
        return Emu3Session(self, rows, len(prompts), cfg_scale)

    def image_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states -> logits over the visual codes (float32), from the head's code rows."""
        return F.linear(hidden, self.image_head, self.image_bias).float()

    def to_bpe_sequence(self, tokens: torch.LongTensor) -> torch.LongTensor:
        """[B, H*W] codes -> [B, H*(W+1)] BPE ids, end-of-line tokens included."""
        h, w = self.grid
        bpe = self.code_to_bpe.to(tokens.device)[tokens].view(-1, h, w)
        eol = torch.full((bpe.shape[0], h, 1), self.eol_token_id, dtype=torch.long, device=tokens.device)
        return torch.cat([bpe, eol], dim=2).flatten(1)

    @torch.no_grad()
    def decode(self, tokens: torch.LongTensor) -> list:
        """[B, H*W] codes -> B PIL images via `decode_image_tokens` and postprocess."""
        tokens = check_tokens(tokens, self.vocab_size, "tokens")
        h, w = self.grid
        if tokens.shape[1] != h * w:
            raise ValueError(f"tokens: expected [B, {h * w}] visual codes, got {list(tokens.shape)}")
        seq = self.to_bpe_sequence(tokens.cpu())
        tail = torch.full((seq.shape[0], 3), self.pad_token_id, dtype=torch.long)  # EOF, EOI, EOS slots
        seq = torch.cat([seq, tail], dim=1).to(self.device)
        pixels = self.model.decode_image_tokens(image_tokens=seq, height=h, width=w).float().cpu()
        return [_to_pil(img, self.processor) for img in pixels]                     # [3, H', W'] each


class Emu3Session(RowEndsSession):
    """Prompt rows then negative-prompt rows of one batch, prefilled in one forward into a
    cache of fixed size (`transformers_session.SlotCache`: the prompts, the H x (W + 1)
    sequence and a scratch slot); rows join with `add_rows` and leave with `keep_rows` (a
    `ResizableSession`); its passes are `transformers_session.RowEndsSession`'s."""

    compilable = True

    def __init__(self, tm: Emu3TokenModel, rows: list[list[int]], batch: int, cfg_scale: float):
        self.tm, self.batch, self.cfg_scale = tm, batch, cfg_scale
        self.reps = len(rows) // batch                   # 2 with guidance: prompt block, negative block
        self.decoder = tm.model.model.text_model
        self.row_ends, self.code_ids = tm.layout, tm.code_to_bpe   # end-of-line tokens; code -> model id
        h, w = tm.grid
        ids, prefill = self.borrow_cache(rows, tm.pad_token_id, self.decoder.config.num_hidden_layers, h * (w + 1),
                                         tm.image_head.dtype)
        with torch.no_grad():
            hidden = self._forward(ids, *prefill)
            self.first_logits = self._guided(hidden[:, -1])
        self.tree: Tree | None = None                    # the last step_tree's, until keep_path
        self.forced: Forced | None = None

def _check_ratio(ratio: str) -> str:
    parts = ratio.split(":") if isinstance(ratio, str) else []
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"ratio: expected 'W:H' with positive integers, e.g. '1:1' or '16:9', got {ratio!r}")
    return ratio


def _check_area(image_area: int | None) -> int | None:
    if image_area is None:
        return None
    if isinstance(image_area, bool) or not isinstance(image_area, int) or image_area < 1:
        raise ValueError(f"image_area: expected a positive integer number of pixels, got {image_area!r}")
    return image_area


def _to_pil(image: torch.Tensor, processor=None):
    """One [3, H, W] image in [-1, 1] -> PIL, with the processor's postprocess when present."""
    if processor is not None and hasattr(processor, "postprocess"):
        out = processor.postprocess([image], return_tensors="PIL.Image.Image")
        pil = out["pixel_values"] if hasattr(out, "keys") else out
        return pil[0] if isinstance(pil, (list, tuple)) else pil
    from PIL import Image

    array = ((image.permute(1, 2, 0) * 0.5 + 0.5) * 255.0).clamp(0, 255).to(torch.uint8).numpy()
    return Image.fromarray(array)
