"""transformers' prepared generation settings, read as the engine's: which logits processors
become the one processed p per position, which are applied at every window position from
that position's prefix, and which are refused (a ValueError naming the processor).

`GenerationMixin.generate` hands a `custom_generate` callable a prepared `LogitsProcessorList`
in this order: classifier-free guidance (`UnbatchedClassifierFreeGuidanceLogitsProcessor`),
the processors (repetition penalty, `prefix_allowed_tokens_fn`, min length, ...), the caller's
own, then with `do_sample` the warpers (temperature, top-k, top-p, ...). Here:

- guidance is run by the session, conditional and unconditional rows in one forward pass,
  mixed as transformers mixes them (on log-softmax scores);
- each processor that is a function of (the prefix, the scores) alone is applied to the
  logits of every window position with that position's prefix: the committed tokens and the
  drafts before it, exactly what verification conditions on (`session.CausalSession._process`);
- temperature, top-k and top-p become the engine's `SamplingConfig` (`scd_core.sampling`:
  verification, drafting, residuals and the AR baseline all sample that one p, the law of
  transformers' warpers: top-k keeps every token tied with the k-th, top-p rounds as there);
- anything else is refused: a warper the engine has no filter for (min-p, typical, eta, ...),
  a processor that keeps state between calls or reads beams or batch layout, and any class
  not known to be a function of the prefix and the scores.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Processors that are functions of (input_ids, scores) alone, row by row: applied at every
# window position with that position's prefix, they give exactly the scores transformers'
# loop gives at that position.
PREFIX_PROCESSORS = (
    "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "RepetitionPenaltyLogitsProcessor",
    "EncoderRepetitionPenaltyLogitsProcessor", "NoRepeatNGramLogitsProcessor",
    "EncoderNoRepeatNGramLogitsProcessor", "NoBadWordsLogitsProcessor", "SequenceBiasLogitsProcessor",
    "PrefixConstrainedLogitsProcessor", "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor",
    "InfNanRemoveLogitsProcessor", "ExponentialDecayLengthPenalty", "SuppressTokensLogitsProcessor",
    "SuppressTokensAtBeginLogitsProcessor", "LogitNormalization",
)
GUIDANCE = "UnbatchedClassifierFreeGuidanceLogitsProcessor"
SAMPLING = {"TemperatureLogitsWarper": "temperature", "TopKLogitsWarper": "top_k", "TopPLogitsWarper": "top_p"}
# Why the others are refused, by class (anything unlisted: not known to be a function of the prefix).
REFUSED = {
    "MinPLogitsWarper": "min-p is not one of the engine's filters (temperature, top-k, top-p)",
    "TypicalLogitsWarper": "typical sampling is not one of the engine's filters (temperature, top-k, top-p)",
    "EpsilonLogitsWarper": "epsilon sampling is not one of the engine's filters (temperature, top-k, top-p)",
    "EtaLogitsWarper": "eta sampling is not one of the engine's filters (temperature, top-k, top-p)",
    "TopHLogitsWarper": "top-h is not one of the engine's filters (temperature, top-k, top-p)",
    "ClassifierFreeGuidanceLogitsProcessor": "it mixes the two halves of a doubled batch; pass guidance_scale "
                                             "(and negative_prompt_ids) instead",
    "HammingDiversityLogitsProcessor": "it belongs to group beam search",
    "WatermarkLogitsProcessor": "its green lists are drawn from a generator it reseeds on every call",
    "SynthIDTextWatermarkLogitsProcessor": "it keeps state between calls",
    "WhisperTimeStampLogitsProcessor": "it reads the batch layout of Whisper's generate",
}
# Stopping criteria the engine honours: the length (the grid) and end-of-sequence tokens.
STOPPING = ("MaxLengthCriteria", "EosTokenCriteria")


@dataclass
class Reading:
    """What the engine takes from transformers' prepared processors."""
    guidance_scale: float | None = None          # transformers' unbatched CFG (None: none)
    negative_ids: Any = None                     # its unconditional prompt ids [B, P] (None: the last prompt token)
    negative_mask: Any = None                    # their attention mask (None: all ones)
    processors: list = field(default_factory=list)   # applied per window position, in order
    sampling: dict = field(default_factory=dict)     # temperature / top_k / top_p for `Settings`


def class_name(obj) -> str:
    """A transformers class's name; any other class's module and name (never one of the
    names above, which are transformers' own classes)."""
    cls = type(obj)
    return cls.__name__ if cls.__module__.startswith("transformers.") else f"{cls.__module__}.{cls.__qualname__}"


def read_processors(processors, do_sample: bool) -> Reading:
    """Split transformers' prepared `LogitsProcessorList` (see the module's docstring); a
    ValueError names the first processor that cannot be applied exactly."""
    reading = Reading()
    warpers: list[str] = []                             # the sampling warpers seen: only warpers may follow
    for index, proc in enumerate(processors or []):
        name = class_name(proc)
        if name == GUIDANCE:
            if index != 0:
                raise ValueError(f"logits_processor: {name} must come first (transformers puts it there)")
            context = proc.unconditional_context
            reading.guidance_scale = float(proc.guidance_scale)
            reading.negative_ids, reading.negative_mask = context["input_ids"], context["attention_mask"]
        elif name in SAMPLING:
            order = list(SAMPLING)
            if warpers and order.index(name) <= order.index(warpers[-1]):
                raise ValueError(f"logits_processor: {name} after {warpers[-1]}; the engine filters once each, "
                                 "in the order temperature, top-k, top-p")
            warpers.append(name)
            reading.sampling[SAMPLING[name]] = getattr(proc, SAMPLING[name])
            if name == "TopKLogitsWarper" and proc.top_k == 1:
                raise ValueError("top_k: 1 with do_sample=True samples among the tokens tied at the largest score "
                                 "in transformers, where the engine's top_k=1 takes the first of them; pass "
                                 "do_sample=False for greedy decoding, or top_k >= 2")
        elif name in PREFIX_PROCESSORS:
            if warpers:
                if name == "LogitNormalization":       # a log-softmax after the filters leaves p as it is
                    continue
                raise ValueError(f"logits_processor: {name} comes after a sampling warper; the engine applies "
                                 "temperature, top-k and top-p last")
            reading.processors.append(proc)
        else:
            why = REFUSED.get(name, "it is not known to be a function of the prefix and the scores alone, "
                                    "so it cannot be applied exactly to a window of drafts")
            raise ValueError(f"logits_processor: {name} is refused: {why}")
    if not do_sample:
        reading.sampling = {"temperature": 0.0}         # greedy: the argmax of the processed scores
    return reading


def read_stopping(criteria) -> list[int]:
    """The end-of-sequence ids of transformers' prepared `StoppingCriteriaList`; a ValueError
    names a criterion the engine cannot honour exactly."""
    eos: list[int] = []
    for crit in criteria or []:
        name = class_name(crit)
        if name not in STOPPING:
            raise ValueError(f"stopping_criteria: {name} is refused: the engine stops at max_new_tokens and at "
                             "end-of-sequence tokens only")
        if name == "EosTokenCriteria":
            eos += [int(t) for t in crit.eos_token_id.reshape(-1).tolist()]
    return eos
