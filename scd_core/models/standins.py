"""Stand-in processors for offline checks: the real transformers processor classes around a
word-level tokenizer that knows a few words and the special tokens at the ids a checkpoint
uses. The model's own prompt template and postprocessing run unchanged, so a test, a drill or
a memory measurement exercises the adapter's real path with no tokenizer download.
"""
from __future__ import annotations

from typing import Sequence

CHAT_TEMPLATE = ("{% for m in messages %}User: {{ m['content'][0]['text'] }} {% endfor %}"
                 "{% if add_generation_prompt %}Assistant:{% endif %}")


def janus_processor(words: Sequence[str], *, pad: int, bos: int, eos: int, image: int, boi: int, eoi: int,
                    num_image_tokens: int):
    """A `JanusProcessor` whose tokenizer knows `words` (ids 10, 11, ...), "User:" and
    "Assistant:" (4, 5), "[UNK]" (3) and the special tokens at the ids given."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import JanusImageProcessor, JanusProcessor, PreTrainedTokenizerFast

    vocab = {"<pad>": pad, "<bos>": bos, "<eos>": eos, "[UNK]": 3, "User:": 4, "Assistant:": 5}
    vocab.update({w: 10 + i for i, w in enumerate(words)})
    vocab.update({"<image_placeholder>": image, "<begin_of_image>": boi, "<end_of_image>": eoi})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="[UNK]",
        extra_special_tokens={"image_token": "<image_placeholder>", "boi_token": "<begin_of_image>",
                              "eoi_token": "<end_of_image>"})
    return JanusProcessor(JanusImageProcessor(), tok, chat_template=CHAT_TEMPLATE, num_image_tokens=num_image_tokens)
