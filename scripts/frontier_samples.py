"""The samples the page shows of `tiny` and `tiny-64` side by side (`demo.frontier_view`).

    python scripts/frontier_samples.py        # writes demo/static/frontier/tiny.png and tiny-64.png

Each model draws the same prompts with the same seeds (SCD-MC, whose samples follow AR's law, at
the model's default sampling: top-k 100, CFG 3), one row per prompt with the prompt written on
its left, each sample shown 64 px wide (`tiny`'s 32 px doubled, `tiny-64`'s as drawn). The PNG
carries the model, prompts, seeds, this command and the sampled tokens as text chunks, which the
page and the tests read.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import scd_core  # noqa: E402
from demo import frontier_view  # noqa: E402

PROMPTS = ("red heart", "cat face", "green apple", "pile poo", "four leaf clover")   # tiny draws these well
SEEDS = (0, 1, 2)
METHOD, WINDOW = "scd-mc", 16
TILE, GAP, LABEL_W, FONT = 64, 4, 118, 13
COMMAND = "python scripts/frontier_samples.py"


def sample(model, prompts=PROMPTS, seeds=SEEDS) -> torch.Tensor:
    """[len(prompts) * len(seeds), N] tokens: row by row, each prompt with every seed."""
    settings = dict(model.default_settings)
    return torch.cat([scd_core.generate(model, [prompt] * len(seeds), method=METHOD, window=WINDOW, seed=list(seeds),
                                        **settings).tokens for prompt in prompts])


def compose(name: str, model, tokens: torch.Tensor, prompts=PROMPTS, seeds=SEEDS):
    """The samples picture of model `name` (a PIL image) drawn from its `tokens`, with its text chunks."""
    from PIL import Image, ImageDraw, ImageFont
    from PIL.PngImagePlugin import PngInfo

    font = ImageFont.load_default(size=FONT)
    sheet = Image.new("RGB", (LABEL_W + len(seeds) * (TILE + GAP), len(prompts) * (TILE + GAP) + GAP), "white")
    pen = ImageDraw.Draw(sheet)
    images = model.decode(tokens)
    for row, prompt in enumerate(prompts):
        y = GAP + row * (TILE + GAP)
        words, lines = prompt.split(), [""]
        for w in words:                                   # the prompt wrapped to the label's width
            line = f"{lines[-1]} {w}".strip()
            if pen.textlength(line, font=font) <= LABEL_W - 8 or not lines[-1]:
                lines[-1] = line
            else:
                lines.append(w)
        top = y + TILE // 2 - len(lines) * (FONT + 3) // 2
        for k, line in enumerate(lines):
            pen.text((4, top + k * (FONT + 3)), line, fill="black", font=font)
        for col in range(len(seeds)):
            image = images[row * len(seeds) + col]
            sheet.paste(image.convert("RGB").resize((TILE, TILE), Image.NEAREST), (LABEL_W + col * (TILE + GAP), y))
    info = PngInfo()
    for key, value in (("model", name), ("prompts", "\n".join(prompts)), ("seeds", ",".join(map(str, seeds))),
                       ("method", METHOD), ("window", str(WINDOW)), ("command", COMMAND)):
        info.add_text(key, value)
    info.add_text("tokens", "\n".join(" ".join(map(str, row)) for row in tokens.tolist()), zip=True)
    return sheet, info


def draw(name: str, prompts=PROMPTS, seeds=SEEDS):
    """Model `name`'s samples of `prompts` x `seeds`, as `compose` draws them."""
    model = scd_core.load_model(name)
    return compose(name, model, sample(model, prompts, seeds), prompts, seeds)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=frontier_view.SAMPLES, help="the folder written to")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in frontier_view.MODELS:
        t0 = time.time()
        sheet, info = draw(name)
        path = args.out / f"{name}.png"
        sheet.save(path, pnginfo=info, optimize=True)
        print(f"wrote {path} ({sheet.size[0]}x{sheet.size[1]}, {time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
