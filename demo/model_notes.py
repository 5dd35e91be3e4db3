"""What the page says and sets for a model before any run: the note under the picker, whether it
can run here, its settings, the words its prompt ignores (the first model's in `demo.layout`,
a picked one's in `demo.model_switch`)."""
from __future__ import annotations

from demo import checks, config, frontier_view, models, texts


def model_info(name: str) -> str:
    """Under the model: what it is and where it stands here (`models.model_note`), its download
    commands as blocks; for `tiny` and `tiny-64`, a link to the two side by side."""
    return texts.command_blocks(models.model_note(name, config.MODELS.loaded(name) is not None)) + frontier_view.model_link(name)


def can_run(name: str) -> bool:
    """Whether the model can run here (loaded, shipped, cached, or downloadable)."""
    return models.unavailable(name, config.MODELS.loaded(name) is not None) is None


def prompt_words(name: str, prompt: str) -> str:
    """Under the prompt box: the words the model will ignore (bag-of-words models)."""
    return texts.prompt_words_note(config.MODELS.at_hand(name) if can_run(name) else None, name, prompt or "")


def defaults(name: str) -> tuple[dict, bool]:
    """The model's defaults by their name in `checks.SETTINGS` (its first example prompt, if it
    reads text), and whether it can run here."""
    page, sampling, ok = config.MODELS.defaults(name)
    prompts = config.MODELS.examples(name) if ok and not models.takes_clip(name) else []
    return checks.defaults_of(page, sampling, prompts[0] if prompts else None), ok
