"""Render the emoji data set from Debian's Noto Color Emoji font.

    python -m scd_core.train.data --out data/emoji32

Inputs, both Debian packages: the font (`fonts-noto-color-emoji`) and Unicode's
`emoji-test.txt` (`unicode-data`: name, group and subgroup of every emoji). Each fully
qualified emoji that the font draws as one colour glyph is rendered with Pillow on white,
its glyph box centred, and downsampled (LANCZOS) to `--size` (32x32 by default; 64 for the
64 px models). Its prompt is its English name
plus its group/subgroup words, so that flags say "flag". Skin-tone variants get a sampling
weight of 0.2. A fixed 5% of designs (chosen by a hash of the name without skin tone, so
every variant of a design falls on the same side) is held out.

Output: `images.safetensors` (uint8 [N, S, S, 3]), `images_big.safetensors` (uint8 [N, B, B, 3],
the source of the video clips; B = `--big`, by default 3 * S: 96 for 32 px; `--big 0` skips it,
for an image-only data set) and `meta.json` (one record per image).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

FONT_PATH = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"
EMOJI_TEST_PATH = "/usr/share/unicode/emoji/emoji-test.txt"
FONT_SIZE = 109          # the size of the font's CBDT bitmaps (136x128)
SKIN_TONE_WEIGHT = 0.2
HELD_OUT_PERCENT = 5


@dataclass
class EmojiEntry:
    emoji: str
    name: str
    group: str
    subgroup: str
    prompt: str = ""
    weight: float = 1.0
    split: str = "train"


def words_of(text: str) -> list[str]:
    """Lower-case words of a name: the runtime prompt tokenizer of the tiny models."""
    from scd_core.models.tiny import prompt_words

    return prompt_words(text)


def prompt_of(name: str, group: str, subgroup: str) -> str:
    """Name words first, then the group/subgroup words not already present."""
    words = words_of(name)
    for w in words_of(group) + words_of(subgroup):
        if w not in words:
            words.append(w)
    return " ".join(words)


def design_key(name: str) -> str:
    """The name without skin tones: all skin-tone variants of a design share it."""
    return re.sub(r"[:,]?\s*(light|medium-light|medium|medium-dark|dark) skin tone", "", name).strip()


def is_held_out(name: str) -> bool:
    digest = hashlib.sha1(design_key(name).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 100 < HELD_OUT_PERCENT


def read_emoji_test(path: str = EMOJI_TEST_PATH) -> list[EmojiEntry]:
    """Fully-qualified emoji with their name, group and subgroup, in file order."""
    entries: list[EmojiEntry] = []
    group = subgroup = ""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# group:"):
            group = line.split(":", 1)[1].strip()
        elif line.startswith("# subgroup:"):
            subgroup = line.split(":", 1)[1].strip()
        elif "; fully-qualified" in line and "#" in line:
            codes = line.split(";", 1)[0].split()
            emoji = "".join(chr(int(c, 16)) for c in codes)
            comment = line.split("#", 1)[1].strip()
            name = re.sub(r"^\S+\s+E\d+\.\d+\s+", "", comment)
            if group == "Component":
                continue
            entries.append(EmojiEntry(emoji, name, group, subgroup))
    if not entries:
        raise ValueError(f"emoji_test: no emoji found in {path}")
    return entries


def render_glyph_rgba(emoji: str, font):
    """The emoji's colour glyph cropped to its box, with its alpha; None when the font lacks it."""
    from PIL import Image, ImageDraw

    canvas = Image.new("RGBA", (4 * FONT_SIZE, 2 * FONT_SIZE), (255, 255, 255, 0))
    ImageDraw.Draw(canvas).text((8, 8), emoji, font=font, embedded_color=True)
    box = canvas.getchannel("A").getbbox()
    if box is None:
        return None
    w, h = box[2] - box[0], box[3] - box[1]
    if w > 1.25 * FONT_SIZE * 1.25 or h > 1.25 * FONT_SIZE * 1.25:   # sequence fell apart
        return None
    glyph = canvas.crop(box)
    rgb = np.asarray(glyph.convert("RGB"), dtype=np.float32)
    if np.ptp(rgb.reshape(-1, 3), axis=0).max() < 8 and rgb.mean() > 250:   # blank
        return None
    return glyph


def render_glyph(emoji: str, font):
    """The emoji's colour glyph cropped to its box, on white; None when the font lacks it."""
    from PIL import Image

    glyph = render_glyph_rgba(emoji, font)
    if glyph is None:
        return None
    white = Image.new("RGBA", glyph.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, glyph).convert("RGB")


def to_square(glyph, size: int, fill: float = 28 / 32):
    """Centre the glyph in a square so that it spans `fill` of the side; resize.

    An RGB glyph goes on white. An RGBA glyph goes on transparency and comes back
    premultiplied ("RGBa", resized so that transparent pixels add no colour), ready to be
    composited over any background as rgb + (1 - alpha) * background.
    """
    from PIL import Image

    side = int(round(max(glyph.size) / fill))
    if glyph.mode == "RGBA":
        square = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    else:
        square = Image.new("RGB", (side, side), (255, 255, 255))
    square.paste(glyph, ((side - glyph.size[0]) // 2, (side - glyph.size[1]) // 2))
    if glyph.mode == "RGBA":
        square = square.convert("RGBa")
    return square.resize((size, size), Image.LANCZOS)


def render_all(entries: list[EmojiEntry], size: int, font_path: str = FONT_PATH, big: int = 96):
    """Images at `size` and at `big` (the source of the video clips; None when `big` is 0), and
    the kept entries."""
    from PIL import ImageFont

    font = ImageFont.truetype(font_path, FONT_SIZE)
    images, bigs, kept = [], [], []
    for entry in entries:
        glyph = render_glyph(entry.emoji, font)
        if glyph is None:
            continue
        images.append(np.asarray(to_square(glyph, size), dtype=np.uint8))
        if big:
            bigs.append(np.asarray(to_square(glyph, big), dtype=np.uint8))
        entry.prompt = prompt_of(entry.name, entry.group, entry.subgroup)
        entry.weight = SKIN_TONE_WEIGHT if "skin tone" in entry.name else 1.0
        entry.split = "val" if is_held_out(entry.name) else "train"
        kept.append(entry)
    return np.stack(images), (np.stack(bigs) if big else None), kept


def save_dataset(out: Path, images: np.ndarray, bigs: np.ndarray | None, entries: list[EmojiEntry]) -> None:
    """`bigs` None: no big renders (an image-only data set; no video clips can be made from it)."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({"images": images}, str(out / "images.safetensors"))
    if bigs is not None:
        save_file({"images": bigs}, str(out / "images_big.safetensors"))
    elif (out / "images_big.safetensors").exists():
        (out / "images_big.safetensors").unlink()       # stale renders of another data set
    (out / "meta.json").write_text(json.dumps([asdict(e) for e in entries], ensure_ascii=False, indent=0))


def load_dataset(folder: str | Path, big: bool = False) -> tuple[np.ndarray, list[dict]]:
    """(uint8 images [N, S, S, 3], metadata records) as written by `save_dataset`;
    `big` picks the big renders (96 px for the 32 px data set)."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    if not (folder / "images.safetensors").exists():
        raise ValueError(f"data: no images.safetensors in {folder}; run python -m scd_core.train.data")
    if big and not (folder / "images_big.safetensors").exists():
        raise ValueError(f"data: no images_big.safetensors in {folder} (rendered with --big 0?); the video "
                         "clips need it: run python -m scd_core.train.data again without --big 0")
    images = load_file(str(folder / ("images_big.safetensors" if big else "images.safetensors")))["images"]
    meta = json.loads((folder / "meta.json").read_text())
    return images, meta


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/emoji32")
    parser.add_argument("--size", type=int, default=32, help="image side in pixels (the tokenizer's --image-size)")
    parser.add_argument("--big", type=int, default=None,
                        help="side of the renders the video clips are made from (default 3 * --size; "
                             "a multiple of --size; 0: none, an image-only data set)")
    parser.add_argument("--font", default=FONT_PATH)
    parser.add_argument("--emoji-test", default=EMOJI_TEST_PATH)
    args = parser.parse_args(argv)
    big = 3 * args.size if args.big is None else args.big
    if args.size < 1 or big < 0 or big % args.size:
        parser.error(f"--big {big} must be a multiple of --size {args.size}")
    t0 = time.time()
    images, bigs, entries = render_all(read_emoji_test(args.emoji_test), args.size, args.font, big=big)
    save_dataset(Path(args.out), images, bigs, entries)
    n_val = sum(e.split == "val" for e in entries)
    n_tone = sum(e.weight < 1 for e in entries)
    print(f"rendered {len(entries)} emoji ({len(entries) - n_tone} designs + {n_tone} skin-tone variants; "
          f"{n_val} held out) to {args.out} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
