"""Fish Speech inference as plain functions of the modules (no runtime): prompt, dual-AR loop, sampling.

    ids = build_prompt(tokenizer, text, ref_text, ref_codes)          # [1 + num_codebooks, T] int64
    codes = generate_codes(model, ids, Sampling(), generator, im_end)  # [num_codebooks, frames]
    wav = codec.decode(codes)

This follows fish-speech 0.1.0 (`models/text2semantic/inference.py`, `content_sequence.py`) for one
request: the interleave prompt `<|interleave|>` [`<|speaker:0|>` reference text, reference codes,
`<|im_end|>`] `<|speaker:0|>` text; one slow step per frame, then the fast LM fills codebooks 1..N-1
from the slow hidden state. Upstream's sampling, kept as it is:
- temperature, top-p and repetition penalty are bfloat16 numbers (0.8 -> 0.80078125);
- repetition penalty over a window of the last 16 generated frames (zeros before the window is
  full); the slow step penalises the window's first frame across all rows (upstream indexes
  `previous_tokens[:, 0]`), each fast step its own codebook's row; the first frame has none;
- top-p before temperature; a token is drawn as argmax(p / q) with q ~ Exp(1) from the generator;
- fast logits cut to the first 1024 entries; generation stops after the frame whose token is
  `<|im_end|>` (never on the first frame); the last generated frame is dropped.
`do_sample=False` takes the top of upstream's own sort after the repetition penalty (what a top-p below
1 / vocab leaves). Sampling runs on the CPU in the logits' dtype, as upstream's arithmetic does. The draws come from a CPU
`torch.Generator`, so a seed gives the same codes on any device.

Fish Audio S2 (fish-speech's repository head, `S2Sampling`, `build_chat_prompt`) keeps the loop and
changes the prompt and the sampling: a chat prompt (system: the instruction and the reference text and
codes; user: the text; assistant: `<|voice|>`), pieces tokenized one by one; the slow token restricted
to the semantic tokens and `<|im_end|>` (a -inf bias elsewhere), top-k 30 with top-p and temperature,
drawn as argmax(p / -log(u)) with u ~ U(0, 1); Repetition Aware Sampling: a second draw at temperature
1.0 / top-p 0.9 replaces the token when it is semantic and among the last 10 frames' tokens (frames
after the first, as upstream's rolling window holds them); the fast codebooks use the same top-k /
top-p / temperature over all `codebook_size` logits, without penalty or bias.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...runtime.lm.cache import DynamicCache, make_cache
from ..blocks.decode import autoregress
from ..blocks.sampling import exponential_draw, top_p_descending
from .model import DualARTransformer
from .tokenizer import FishTokenizer, HFTokenizer

WINDOW = 16             # repetition-penalty window (frames)
FAST_VOCAB = 1024       # upstream samples the fast codebooks from the first 1024 logits
RAS_WINDOW = 10         # S2: Repetition Aware Sampling looks back this many frames
RAS_TEMPERATURE, RAS_TOP_P = 1.0, 0.9
SPEAKER_TAG = re.compile(r"(<\|speaker:\d+\|>)")
MAX_BATCH_SPEAKERS = 5  # S2's generate_long: at most 5 speaker turns per batch
BATCH_BYTES = 512       # and at most chunk_length (512 by default) UTF-8 bytes


def _check_shared(temperature: float, top_p: float, max_new_tokens: int) -> None:
    """The limits S1 and S2 sampling share (upstream's ranges)."""
    if not 0 < temperature < 2:
        raise ValueError(f"temperature: expected in (0, 2), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: expected in (0, 1], got {top_p}")
    if int(max_new_tokens) < 2:
        raise ValueError(f"max_new_tokens: expected >= 2, got {max_new_tokens}")


@dataclass
class Sampling:
    do_sample: bool = True
    temperature: float = 0.8
    top_p: float = 0.8
    repetition_penalty: float = 1.1
    max_new_tokens: int = 1024

    def validate(self) -> None:
        _check_shared(self.temperature, self.top_p, self.max_new_tokens)
        if not 0 < self.repetition_penalty < 2:
            raise ValueError(f"repetition_penalty: expected in (0, 2), got {self.repetition_penalty}")


@dataclass
class S2Sampling:
    """Fish Audio S2's sampling options, with upstream's defaults (tools and generate_long)."""
    do_sample: bool = True
    temperature: float = 1.0
    top_p: float = 0.9
    top_k: int = 30
    max_new_tokens: int = 1024

    def validate(self) -> None:
        _check_shared(self.temperature, self.top_p, self.max_new_tokens)
        if int(self.top_k) < 1:
            raise ValueError(f"top_k: expected >= 1, got {self.top_k}")


def _bf16(x: float) -> Tensor:
    return torch.tensor(x, dtype=torch.bfloat16)


def sample(logits: Tensor, s: Sampling, previous: Tensor | None, generator: torch.Generator | None) -> int:
    """One token from logits [V] (upstream's logits_to_probs + multinomial_sample_one_no_sync), on the CPU
    in the logits' own dtype as upstream computes it (a bf16 model samples from bf16 arithmetic): its
    penalty runs in that dtype, then the shared descending top-p (threshold in bf16, as upstream's tensor)
    and the exponential-race draw, temperature after top-p."""
    logits = logits.cpu().clone()
    if previous is not None:
        penalty = _bf16(s.repetition_penalty)
        prev = previous.long()
        score = logits.gather(0, prev)
        logits.scatter_(0, prev, torch.where(score < 0, score * penalty, score / penalty))
    if not s.do_sample:                   # the first of upstream's sort, as a top-p below 1 / vocab keeps
        return int(torch.sort(logits, descending=True)[1][0])
    logits = top_p_descending(logits, _bf16(s.top_p))
    probs = torch.softmax(logits / torch.clip(_bf16(s.temperature), min=1e-5), dim=-1)
    return int(exponential_draw(probs, generator))


def sample_s2(logits: Tensor, temperature: float, top_p: float, top_k: int, do_sample: bool,
              generator: torch.Generator | None) -> int:
    """One token from logits [V] as S2's logits_to_probs + multinomial_sample_one_no_sync, on the CPU in
    the logits' dtype (upstream makes temperature and top-p tensors of the model's dtype)."""
    logits = logits.cpu()
    sorted_logits, sorted_idx = torch.sort(logits, descending=True)
    if not do_sample:                     # what top_k = 1 leaves
        return int(sorted_idx[0])
    cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    remove = (cum > torch.tensor(top_p, dtype=logits.dtype)) | (torch.arange(logits.numel()) >= top_k)
    remove[0] = False
    logits = torch.where(remove.scatter(0, sorted_idx, remove), float("-inf"), logits)
    probs = torch.softmax(logits / torch.clip(torch.tensor(temperature, dtype=logits.dtype), min=1e-5), dim=-1)
    q = -torch.log(torch.rand(probs.shape, dtype=probs.dtype, generator=generator))
    return int(torch.argmax(probs / q))


def build_prompt(tokenizer: FishTokenizer, text: str, num_codebooks: int, ref_text: str | None = None,
                 ref_codes: Tensor | None = None) -> Tensor:
    """The prompt [1 + num_codebooks, T] (int64): token ids in row 0, reference codes under their
    semantic tokens in rows 1.. (zeros elsewhere)."""
    parts: list[tuple[str, Tensor | None]] = [("<|interleave|>", None)]
    if ref_codes is not None:
        if ref_codes.dim() != 2 or ref_codes.shape[0] != num_codebooks:
            raise ValueError(f"reference codes: expected [{num_codebooks}, frames], got {list(ref_codes.shape)}")
        parts += [("<|speaker:0|>", None), (ref_text or "", None), ("", ref_codes), ("<|im_end|>", None)]
    parts += [("<|speaker:0|>", None), (text, None)]
    return _columns(tokenizer, parts, num_codebooks)


def _columns(tokenizer: FishTokenizer | HFTokenizer, parts: list[tuple[str, Tensor | None]],
             num_codebooks: int) -> Tensor:
    """Each text piece tokenized on its own (merges never cross pieces), codes under their semantic tokens."""
    columns = []
    for piece, codes in parts:
        if codes is None:
            ids = torch.tensor(tokenizer.encode(piece), dtype=torch.long)
            col = torch.zeros(num_codebooks + 1, ids.numel(), dtype=torch.long)
            col[0] = ids
        else:
            codes = codes.long().cpu()
            col = torch.cat([codes[:1] + tokenizer.semantic_begin_id, codes], dim=0)
        columns.append(col)
    return torch.cat(columns, dim=1)


def speaker_turns(text: str) -> str:
    """S2's user text: split at `<|speaker:N|>` tags into stripped turns joined by newlines (text before
    the first tag dropped), as upstream batches them; text without tags as it is."""
    turns = split_turns(text)
    return "\n".join(turns) if turns else text


def split_turns(text: str) -> list[str]:
    """Upstream's split_text_by_speaker: the stripped turns starting at each `<|speaker:N|>` tag (text before
    the first tag dropped); [] for text without tags."""
    parts = SPEAKER_TAG.split(text)
    turns, i = [], 0
    while i < len(parts):
        part = parts[i].strip()
        if SPEAKER_TAG.fullmatch(part):
            turns.append((part + parts[i + 1]).strip() if i + 1 < len(parts) else part)
            i += 2
        else:
            i += 1
    return turns


def group_batches(turns: list[str], max_speakers: int = MAX_BATCH_SPEAKERS,
                  max_bytes: int = BATCH_BYTES) -> list[str]:
    """Upstream's group_turns_into_batches (S2's generate_long passes max_speakers=5, max_bytes=chunk_length,
    512 by default): a new batch when the current one holds `max_speakers` turns or the next turn would take
    it past `max_bytes` UTF-8 bytes; a batch is its turns joined by newlines."""
    batches, current, size = [], [], 0
    for turn in turns:
        n = len(turn.encode("utf-8"))
        if len(current) >= max_speakers or (current and size + n > max_bytes):
            batches.append("\n".join(current))
            current, size = [turn], n
        else:
            current.append(turn)
            size += n
    if current:
        batches.append("\n".join(current))
    return batches


def build_chat_prompt(tokenizer: HFTokenizer, text: str, num_codebooks: int, ref_text: str | None = None,
                      ref_codes: Tensor | None = None, history: list[tuple[str, Tensor]] = ()) -> Tensor:
    """S2's prompt [1 + num_codebooks, T] (upstream's Conversation: system, user, open assistant voice turn).
    As upstream, a reference is used only with a non-empty transcript; a transcript without a speaker tag
    gets `<|speaker:0|>`. `history`: the earlier batches of the same text, (batch text, generated codes),
    each a user turn and a closed assistant voice turn holding its codes, as upstream's generate_long
    appends them to the conversation."""
    parts: list[tuple[str, Tensor | None]] = [("<|im_start|>system\n", None)]
    if ref_codes is not None and ref_text:
        if ref_codes.dim() != 2 or ref_codes.shape[0] != num_codebooks:
            raise ValueError(f"reference codes: expected [{num_codebooks}, frames], got {list(ref_codes.shape)}")
        tagged = ref_text if SPEAKER_TAG.search(ref_text) else f"<|speaker:0|>{ref_text}"
        parts += [("convert the provided text to speech reference to the following:\n\nText:\n", None),
                  (tagged, None), ("\n\nSpeech:\n", None), ("", ref_codes)]
    else:
        parts.append(("convert the provided text to speech", None))
    parts.append(("<|im_end|>\n", None))
    for earlier, codes in history:
        if codes.dim() != 2 or codes.shape[0] != num_codebooks:
            raise ValueError(f"earlier batch codes: expected [{num_codebooks}, frames], got {list(codes.shape)}")
        parts += [("<|im_start|>user\n", None), (speaker_turns(earlier), None), ("<|im_end|>\n", None),
                  ("<|im_start|>assistant\n<|voice|>", None), ("", codes), ("<|im_end|>\n", None)]
    parts += [("<|im_start|>user\n", None), (speaker_turns(text), None),
              ("<|im_end|>\n", None), ("<|im_start|>assistant\n<|voice|>", None)]
    return _columns(tokenizer, parts, num_codebooks)


def fast_frame_s2(model: DualARTransformer, logits: Tensor, hidden: Tensor, s: S2Sampling, recent: Tensor | None,
                  generator: torch.Generator | None, bias: Tensor) -> Tensor:
    """S2's frame: the constrained slow token (with Repetition Aware Sampling against `recent`, the
    window's tokens, None on the first frame), then the fast LM over the codebooks."""
    c = model.config
    biased = logits.cpu() + bias.to(logits.dtype)
    token = sample_s2(biased, s.temperature, s.top_p, s.top_k, s.do_sample, generator)
    high = sample_s2(biased, RAS_TEMPERATURE, RAS_TOP_P, s.top_k, s.do_sample, generator)
    if recent is not None and bool((recent == token).any()) \
            and model.semantic_begin_id <= token <= model.semantic_end_id:
        token = high
    frame = [token]
    fast = DynamicCache()
    model.forward_fast(hidden, fast, 0)
    code = min(max(token - model.semantic_begin_id, 0), c.codebook_size - 1)
    frame.append(code)
    for i in range(1, c.num_codebooks):
        h = model.fast_embeddings(torch.tensor([[code]], device=hidden.device))
        code = sample_s2(model.forward_fast(h, fast, i), s.temperature, s.top_p, s.top_k, s.do_sample, generator)
        frame.append(code)
    return torch.tensor(frame, dtype=torch.long)


def semantic_bias(model: DualARTransformer, im_end_id: int) -> Tensor:
    """0 on the semantic tokens and <|im_end|>, -inf elsewhere (S2's constrained decoding)."""
    bias = torch.full((model.config.vocab_size,), float("-inf"))
    bias[model.semantic_begin_id: model.semantic_end_id + 1] = 0.0
    bias[im_end_id] = 0.0
    return bias


def fast_frame(model: DualARTransformer, logits: Tensor, hidden: Tensor, s: Sampling, window: Tensor | None,
               generator: torch.Generator | None) -> Tensor:
    """The slow step's token, then the fast LM over the codebooks: one frame [1 + N] (token, codes)."""
    c = model.config
    token = sample(logits, s, window[:, 0] if window is not None else None, generator)
    frame = [token]
    fast = DynamicCache()
    model.forward_fast(hidden, fast, 0)
    code = min(max(token - model.semantic_begin_id, 0), c.codebook_size - 1)
    frame.append(code)
    for i in range(1, c.num_codebooks):
        h = model.fast_embeddings(torch.tensor([[code]], device=hidden.device))
        fast_logits = model.forward_fast(h, fast, i)[:FAST_VOCAB]
        code = sample(fast_logits, s, window[i + 1] if window is not None else None, generator)
        frame.append(code)
    return torch.tensor(frame, dtype=torch.long)


def penalty_window(history: list[Tensor], rows: int) -> Tensor | None:
    """Upstream's window for the next frame: the last 16 frames generated after the first, zero-padded
    on the right while fewer (upstream reads them from a zero-initialised buffer); None for the first."""
    if not history:
        return None
    loop = history[1:]
    window = torch.zeros(rows, WINDOW, dtype=torch.long)
    recent = loop[-WINDOW:]
    if recent:
        window[:, : len(recent)] = torch.stack(recent, dim=1)
    return window


def generate_codes(model: DualARTransformer, prompt: Tensor, s: Sampling | S2Sampling,
                   generator: torch.Generator | None,
                   im_end_id: int, cache_kind: str = "dynamic", check: Callable[[], None] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> Tensor:
    """The dual-AR loop (the shared decode loop, one frame per step): codes [num_codebooks, frames]
    (int64, CPU); the end frame, or the last frame when none came, is dropped as upstream does."""
    s.validate()
    c = model.config
    device = model.embeddings.weight.device
    steps = min(int(s.max_new_tokens), c.max_seq_len - prompt.shape[1])
    if steps < 2:
        raise ValueError(f"the prompt ({prompt.shape[1]} tokens) leaves no room in max_seq_len {c.max_seq_len}")
    cache = make_cache(cache_kind)
    state = {"pos": prompt.shape[1], "hidden": None}

    def slow(x: Tensor, start: int) -> Tensor:
        logits, state["hidden"] = model.forward_slow(x.to(device), cache, start)
        return logits

    if isinstance(s, S2Sampling):
        bias = semantic_bias(model, im_end_id)

        def choose(logits: Tensor, history: list[Tensor]) -> Tensor:
            recent = torch.tensor([int(f[0]) for f in history[1:][-RAS_WINDOW:]]) if history else None
            return fast_frame_s2(model, logits, state["hidden"], s, recent, generator, bias)
    else:
        def choose(logits: Tensor, history: list[Tensor]) -> Tensor:
            return fast_frame(model, logits, state["hidden"], s, penalty_window(history, c.num_codebooks + 1),
                              generator)

    def step(frame: Tensor, i: int) -> Tensor:
        state["pos"] += 1
        return slow(frame[:, None], state["pos"] - 1)

    def stop(frame: Tensor) -> bool:       # upstream checks only the frames after the first
        state["frames"] = state.get("frames", 0) + 1
        return state["frames"] > 1 and int(frame[0]) == im_end_id

    frames = autoregress(slow(prompt, 0), choose, step, stop, steps, check=check, progress=progress)
    if len(frames) == steps:               # no end frame: upstream drops the last frame all the same
        frames = frames[:-1]
    if not frames:
        return torch.zeros(c.num_codebooks, 0, dtype=torch.long)
    return torch.stack(frames, dim=1)[1:]
