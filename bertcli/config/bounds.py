"""Upper bounds (`le`) of the numeric recipe keys and flags: the largest value the arithmetic
behind a key can hold, with room. A value past them is refused at load time, as 0 or nan are,
instead of overflowing later (an epoch count of 1e308 made `int(epochs * batches)` raise
OverflowError deep in the schedule). Where the bound depends on the data (total steps = epochs x
batches per epoch), it is checked again right after the data is read
(bertcli.finetune.engine.schedule_lengths).
"""

from __future__ import annotations

MAX_INT32 = 2**31 - 1     # step counters, schedule lengths, token ids and offsets are int32 somewhere
MAX_STEPS = MAX_INT32     # optimizer steps, warmup, intervals between logs / evaluations / saves
MAX_ROWS = 2**53          # documents / examples: counted exactly in a float64
MAX_BATCH = 2**20         # sequences per step: batch x length x width stays far inside int64 offsets
MAX_LENGTH = 2**17        # tokens per row (131,072: 16x ModernBERT's 8,192)
MAX_VOCAB = 2**24         # ids are int32; an embedding table of 16.7M rows is already 50 GB at H=768
MAX_ALPHABET = 0x110000   # every Unicode code point
MAX_WIDTH = 2**16         # hidden / embedding width (intermediate: 8x)
MAX_LAYERS = 2**10        # layers, heads, groups, token types
MAX_THREADS = 2**12       # threads and worker processes
MAX_SEED = 2**32 - 1      # numpy's seeds; torch gets seed x 1009 + rank, far inside 2^64
MAX_KEEP = 10_000         # checkpoints kept, answers listed per question
MAX_LR = 10.0             # a peak learning rate; an update of lr x 10 per weight is already chaos
MAX_EPOCHS = 1e6          # passes over the data; total steps are bounded with the data too
MAX_WEIGHT_DECAY = 10.0   # decoupled: each step shrinks a weight by lr x decay
MAX_GRAD_CLIP = 1e9       # a gradient norm cap (any finite value; past this it clips nothing)
MAX_ROPE_THETA = 1e12     # theta^(2i/d) stays finite in float32 frequencies
MAX_TEMPERATURE = 1e3     # distillation's loss is scaled by T^2: 1e6 at most
MAX_LOSS_WEIGHT = 1e6     # loss weights: a weighted sum of finite losses stays finite
MAX_SCALE = 1e4           # embedding logits = cosine x scale, exponentiated in the loss (float32)
MAX_LOGIT_GAP = 1e6       # a threshold on a difference of logits, either sign
