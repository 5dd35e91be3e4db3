"""Lumina-mGPT 7B (512 / 768 / 1024 px) on transformers' Chameleon, behind the TokenModel contract.

What this adapter hides from the engine:
- the sequence layout: `<bos> prompt <sep> <racm3:break> <h> <w>` (the header is part of the
  prompt here), then rows of W image tokens each followed by an end-of-row token (8803), then
  end-of-image. The engine only sees the H x W grid of image *codes* (V = 8192); the adapter maps
  code index <-> BPE id and inserts every end-of-row token itself (those positions are forced,
  p is one-hot there, so leaving them out of the engine's view changes no distribution).
- image logits: `ChameleonForConditionalGeneration.forward` masks every image logit, so the base
  model's hidden states are multiplied by the image rows of `lm_head` directly.
- CFG as in Lumina's `inference_solver.py`: conditional rows carry the prompt, unconditional rows
  only `<racm3:break> <h> <w>`; both run in ONE batched forward (left padding, explicit
  position ids and a 4-D attention mask).
- the KV cache is of fixed size and position-indexed (`transformers_session.SlotCache`):
  generated sequence index s of a row lives in slot P + s, so each row can start anywhere,
  "forgetting" is simply masking and overwriting, and a step reads nothing back. Rows join a
  running session (`add_rows`: the prompt regions of both batches are left-padded to the
  longer one) and leave it (`keep_rows`: the prompt region shrinks to the bucket of the
  longest kept prompt, `static.bucket`).
- the checkpoint conversion: Lumina stores q/k-norm weights as (model_parallel_size, head_dim),
  transformers expects (num_heads, head_dim) (k: num_key_value_heads).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from .checkpoints import pick_device_dtype, resolve_weights
from .checks import check_prompts
from .transformers_session import RowEnds, RowEndsSession, head_rows
from .tree import Forced, Tree
from .hub import HubFiles, ProgressFn, cached

HUB_FILES = {name: HubFiles.transformers(repo, approx_gb=14.0) for name, repo in (
    ("lumina-mgpt-7b-512", "Alpha-VLLM/Lumina-mGPT-7B-512"),
    ("lumina-mgpt-7b-768", "Alpha-VLLM/Lumina-mGPT-7B-768"),
    ("lumina-mgpt-7b-1024", "Alpha-VLLM/Lumina-mGPT-7B-1024"),
)}
HUB_IDS = {name: files.repo_id for name, files in HUB_FILES.items()}
PROMPT_TEMPLATE = "Generate an image of {w}x{h} according to the following prompt:\n{prompt}"
# Paper settings (SCD, Lumina-mGPT 7B): CFG 3, image top-k 2000, window L = 64.
DEFAULT_SETTINGS = {"cfg_scale": 3.0, "top_k": 2000, "top_p": 1.0, "temperature": 1.0, "window": 64}
VQGAN_ENV = "SCD_LUMINA_VQGAN"
# Meta ships the Chameleon VQGAN (with its decoder) only through its own licence form, not on
# the Hugging Face Hub; Lumina-mGPT's README asks for the same files.
VQGAN_HOW = ("Meta's Chameleon VQGAN (tokenizer/vqgan.ckpt and vqgan.yaml, Meta Chameleon Research "
             "License): request it at https://ai.meta.com/resources/models-and-libraries/chameleon-downloads/ "
             f"and set {VQGAN_ENV} to vqgan.ckpt (or its folder), or pass vqgan_path=")


@dataclass(frozen=True)
class LuminaLayout:
    """Special token ids of Lumina-mGPT's image layout (Chameleon BPE ids)."""

    bos: int = 0
    sep: int = 8710              # <reserved08706>, end of the human turn
    image_start: int = 8197      # <racm3:break>
    eoi: int = 8196              # <eoss>
    eol: int = 8803              # <reserved08799>, end of an image row
    grid_token_base: int = 8804  # header token = base + number of 32-px patches
    latent_per_header: int = 2   # latent rows per header unit (32 px / 16 px)
    pad: int = 1                 # any id: padded slots are never attended to


# --------------------------------------------------------------------------- conversion

def convert_qk_norm_state_dict(state_dict: Mapping[str, torch.Tensor], num_heads: int,
                               num_kv_heads: int) -> dict[str, torch.Tensor]:
    """Rewrite Lumina's q/k-norm weights (mp, head_dim) to transformers' (heads, head_dim).

    Each shard's gamma/beta applies to its contiguous block of heads, hence repeat_interleave.
    """
    out = dict(state_dict)
    for key, w in state_dict.items():
        m = re.search(r"self_attn\.(q|k)_norm\.(weight|bias)$", key)
        if m is None:
            continue
        heads = num_heads if m.group(1) == "q" else num_kv_heads
        if w.dim() != 2 or heads % w.shape[0] != 0:
            raise ValueError(f"state_dict: {key} has shape {tuple(w.shape)}, not (mp, head_dim) with mp | {heads}")
        out[key] = w.repeat_interleave(heads // w.shape[0], dim=0)
    return out


def _safetensors_files(folder: str) -> list[str]:
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, n) for n in names]
    single = os.path.join(folder, "model.safetensors")
    return [single] if os.path.isfile(single) else []


@torch.no_grad()
def load_qk_norms(model, folder: str) -> int:
    """Copy the converted q/k-norm tensors of a Lumina checkpoint folder into `model`.

    Returns how many tensors were set; raises ValueError if a layer's norm is missing.
    """
    from safetensors import safe_open

    cfg = model.config
    params = dict(model.named_parameters())
    wanted = {k for k in params if re.search(r"self_attn\.(q|k)_norm\.(weight|bias)$", k)}
    found: dict[str, torch.Tensor] = {}
    for path in _safetensors_files(folder):
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                if key in wanted:
                    found[key] = f.get_tensor(key)
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"{folder}: checkpoint lacks q/k-norm weights, e.g. {sorted(missing)[:3]}")
    converted = convert_qk_norm_state_dict(found, cfg.num_attention_heads, cfg.num_key_value_heads)
    for key, w in converted.items():
        params[key].copy_(w.to(params[key].dtype))
    return len(converted)


# --------------------------------------------------------------------------- the model

class LuminaTokenModel:
    """Lumina-mGPT behind the TokenModel contract (V = the image codebook, grid = latent H x W)."""

    def __init__(self, model, encode: Callable[[str], list[int]], latent_hw: tuple[int, int],
                 layout: LuminaLayout = LuminaLayout(), vqgan=None, image_size: int | None = None,
                 prompt_template: str = PROMPT_TEMPLATE) -> None:
        self.model = model.eval()
        self.encode = encode
        self.layout = layout
        self.grid = (int(latent_hw[0]), int(latent_hw[1]))
        self.image_size = image_size or 16 * self.grid[0]
        self.prompt_template = prompt_template
        self.vqgan = vqgan
        self.default_settings = dict(DEFAULT_SETTINGS)
        mapping = model.model.vocabulary_mapping.img2bpe
        self.vocab_size = len(mapping)
        if sorted(mapping) != list(range(self.vocab_size)):
            raise ValueError("model: its vocabulary_map does not name image codes 0..V-1")
        weight = model.lm_head.weight
        bpe = [mapping[i] for i in range(self.vocab_size)]
        self.code2bpe = torch.tensor(bpe, device=weight.device)
        self.image_head = head_rows(weight, bpe)                    # [V, hidden]
        self.rows = RowEnds(self.grid[1], layout.eol, layout.pad)

    @property
    def device(self) -> torch.device:
        return self.image_head.device

    def header_ids(self) -> list[int]:
        lay = self.layout
        h, w = (n // lay.latent_per_header for n in self.grid)
        return [lay.image_start, lay.grid_token_base + h, lay.grid_token_base + w]

    def cond_ids(self, prompt: str) -> list[int]:
        h, w = (16 * n for n in self.grid)                                 # pixels: 16 per latent
        text = self.prompt_template.format(h=h, w=w, prompt=prompt)
        return [self.layout.bos, *self.encode(text), self.layout.sep, *self.header_ids()]

    def uncond_ids(self) -> list[int]:
        return self.header_ids()

    def image_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states -> logits over the image codes (bypasses the image-logit mask)."""
        return (hidden @ self.image_head.T).float()

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "LuminaSession":
        prompts = check_prompts(prompts)
        cfg = float(cfg_scale)
        if not cfg == cfg or cfg < 0:
            raise ValueError(f"cfg_scale: expected a finite number >= 0, got {cfg_scale!r}")
        return LuminaSession(self, prompts, cfg)

    def decode(self, tokens: torch.LongTensor) -> list:
        if self.vqgan is None:
            raise RuntimeError(f"Lumina-mGPT decode needs {VQGAN_HOW}")
        from .lumina_vqgan import decode_codes, to_pil

        tokens = _check_tokens(tokens, self.vocab_size, "tokens")
        if tokens.shape[1] != self.grid[0] * self.grid[1]:
            raise ValueError(f"tokens: expected [B, {self.grid[0] * self.grid[1]}], got {tuple(tokens.shape)}")
        return to_pil(decode_codes(self.vqgan, tokens, self.grid))


def _check_tokens(tokens, vocab_size: int, name: str) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int):
        raise ValueError(f"{name}: expected an integer tensor [B, W]")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size})")
    return tokens.long()


class LuminaSession(RowEndsSession):
    """One batch being decoded; cond rows 0..B-1, uncond rows B..2B-1 when cfg_scale != 1, in a
    cache of fixed size (`transformers_session.SlotCache`: the prompts, the h x (w + 1)
    sequence and a scratch slot). Rows join with `add_rows` and leave with `keep_rows` (a
    `ResizableSession`); its passes are `transformers_session.RowEndsSession`'s."""

    compilable = True

    def __init__(self, tm: LuminaTokenModel, prompts: list[str], cfg_scale: float) -> None:
        self.tm = tm
        self.cfg_scale = cfg_scale
        self.batch = len(prompts)
        self.decoder = tm.model.model
        self.row_ends, self.code_ids = tm.rows, tm.code2bpe   # end-of-row tokens; code -> model id
        rows = [tm.cond_ids(p) for p in prompts]
        if cfg_scale != 1.0:
            rows += [tm.uncond_ids() for _ in prompts]
        self.reps = len(rows) // self.batch              # 2 with guidance: cond block, uncond block
        h, w = tm.grid
        ids, prefill = self.borrow_cache(rows, tm.layout.pad, tm.model.config.num_hidden_layers, h * (w + 1),
                                         tm.image_head.dtype)
        with torch.no_grad():
            hidden = self._forward(ids, *prefill)
        self.first_logits = self._guided(hidden[:, -1])
        self.tree: Tree | None = None                        # the last step_tree's, until keep_path
        self.forced: Forced | None = None

    @property
    def P(self) -> int:
        """Slots of the prompt region: the longest prompt's tokens, padded to a bucket."""
        return self.kv.P


# --------------------------------------------------------------------------- loading

def _size_from_name(name: str) -> int | None:
    m = re.search(r"(?<!\d)(512|768|1024)(?!\d)", os.path.basename(os.path.normpath(name)) or name)
    return int(m.group(1)) if m else None


def resolve_folder(name_or_path: str, *, local_files_only: bool = False, progress: ProgressFn | None = None) -> str:
    """Registry name, Hub id or local folder -> a local folder (downloading on first use)."""
    files = HUB_FILES.get(name_or_path) if isinstance(name_or_path, str) else None
    return resolve_weights(name_or_path, files, local_files_only=local_files_only, progress=progress)


def _find_vqgan(folder: str, vqgan_path: str | None) -> tuple[str | None, str | None]:
    candidates = [vqgan_path, os.environ.get(VQGAN_ENV)]
    if folder:
        for sub in ("", "tokenizer", "image_tokenizer", "chameleon/tokenizer", "ckpts/chameleon/tokenizer"):
            candidates.append(os.path.join(folder, sub, "vqgan.ckpt"))
    for c in candidates:
        if c and os.path.isdir(c):
            c = os.path.join(c, "vqgan.ckpt")
        if c and os.path.isfile(c):
            yaml_path = os.path.join(os.path.dirname(c), "vqgan.yaml")
            return c, yaml_path if os.path.isfile(yaml_path) else None
    if vqgan_path:
        raise FileNotFoundError(f"vqgan_path: no VQGAN checkpoint at {vqgan_path!r}")
    return None, None


def load_lumina(name_or_path: str, *, device=None, dtype=None, vqgan_path: str | None = None,
                image_size: int | None = None, attn_implementation: str = "sdpa",
                require_vqgan: bool = False, layout: LuminaLayout | None = None,
                local_files_only: bool = False, progress: ProgressFn | None = None,
                trust_pickle=None) -> LuminaTokenModel:
    """Load Lumina-mGPT from a registry name (downloaded on first use), a Hub id or a folder.

    The VQGAN decoder (Meta's `vqgan.ckpt`) is looked up from `vqgan_path`, the
    SCD_LUMINA_VQGAN variable, or the model folder; without it tokens are generated but
    `decode` raises (unless `require_vqgan=True`, which fails at load time). `trust_pickle`
    names a vqgan.ckpt to load with full pickle if `torch.load(weights_only=True)` refuses it.
    """
    from transformers import AutoTokenizer, ChameleonForConditionalGeneration

    folder = resolve_folder(name_or_path, local_files_only=local_files_only, progress=progress)
    size = image_size or _size_from_name(name_or_path) or _size_from_name(folder)
    if size not in (512, 768, 1024) and not (isinstance(size, int) and size % 32 == 0 and size > 0):
        raise ValueError(f"image_size: cannot tell the resolution of {name_or_path!r}; pass image_size=512/768/1024")
    device, dtype = pick_device_dtype(device, dtype)
    vq_ckpt, vq_yaml = _find_vqgan(folder, vqgan_path)
    if require_vqgan and vq_ckpt is None:
        raise FileNotFoundError(f"vqgan_path: vqgan.ckpt not found; Lumina-mGPT decodes with {VQGAN_HOW}")
    model = ChameleonForConditionalGeneration.from_pretrained(
        folder, dtype=dtype, ignore_mismatched_sizes=True, attn_implementation=attn_implementation)
    load_qk_norms(model, folder)
    model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vq = None
    if vq_ckpt is not None:
        from .lumina_vqgan import load_chameleon_vqgan
        vq = load_chameleon_vqgan(vq_ckpt, vq_yaml, device=device, dtype=torch.float32,
                                  trust_pickle=trust_pickle)
    latent = size // 16
    layout = layout or LuminaLayout()
    if tokenizer.bos_token_id is not None and tokenizer.bos_token_id != layout.bos:
        layout = dataclasses.replace(layout, bos=int(tokenizer.bos_token_id))
    # As xllmx's Tokenizer.encode: no special tokens, BOS prepended by the adapter.
    return LuminaTokenModel(model, lambda text: tokenizer.encode(text, add_special_tokens=False),
                            (latent, latent), layout=layout, vqgan=vq, image_size=size)


def hub_files(name: str) -> tuple[HubFiles, ...]:
    return (HUB_FILES[name],)


def gpu_reason(name: str) -> str | None:
    return "7B parameters"


def manual_missing(name: str) -> str | None:
    """What `name` needs that no download provides (Meta's VQGAN), or None. Cheap."""
    folder = cached(HUB_FILES[name]) if name in HUB_FILES else (name if os.path.isdir(name) else None)
    try:
        vq, _ = _find_vqgan(folder or "", None)
    except FileNotFoundError as exc:
        return str(exc)
    return None if vq is not None else f"decoding needs {VQGAN_HOW}"


def claims_folder(path: str) -> bool:
    """A local Chameleon-type checkpoint folder whose name says Lumina."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg) or "lumina" not in os.path.abspath(path).lower():
        return False
    try:
        with open(cfg) as f:
            return json.load(f).get("model_type") == "chameleon"
    except (OSError, ValueError):
        return False
