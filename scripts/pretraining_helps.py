"""Does pretraining help? Fine-tune a checkpoint and its randomly initialized twin (same
architecture, data, hyperparameters, seed and steps) on a small task built offline from the
built-in corpus, and print both dev accuracies as JSON.

    python scripts/pretraining_helps.py runs/bert-tiny/final
    python scripts/pretraining_helps.py runs/bert-tiny/final --probe shuffle --full --lr 1e-3 --epochs 4

Probes (see scripts/probe.py): `replace` (is this sentence as written, or were some of its
words replaced by random ones?), `order` (are two consecutive sentences in their original order?)
and `shuffle` (are its words reordered?). Chance is 50%. By default the encoder is frozen and only
the pooler and classifier train (the feature-based protocol); `--full` fine-tunes everything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="a bertcli or transformers BERT/RoBERTa/ALBERT directory")
    p.add_argument("--probe", choices=("replace", "order", "shuffle"), default="replace")
    p.add_argument("--train", type=int, default=2000, help="training examples")
    p.add_argument("--dev", type=int, default=2000, help="dev examples")
    p.add_argument("--epochs", type=float, default=8)
    p.add_argument("--lr", type=float, default=5e-3,
                   help="peak learning rate, both runs (full fine-tuning: ~1e-3 tiny, ~5e-5 base)")
    p.add_argument("--full", action="store_true", help="fine-tune the whole encoder, not only pooler and classifier")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, default=None, help="where the two runs are written (default: a temporary folder)")
    args = p.parse_args(argv)

    from probe import pretraining_helps  # scripts/probe.py, beside this file

    from bertcli.core.console import print_error
    from bertcli.core.errors import UserError

    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = pretraining_helps(args.checkpoint, args.out or Path(tmp), kind=args.probe, n_train=args.train,
                                       n_dev=args.dev, epochs=args.epochs, learning_rate=args.lr,
                                       batch_size=args.batch_size, max_seq_length=args.max_seq_length,
                                       freeze_encoder=not args.full, dropout=args.dropout, seed=args.seed, device=args.device)
        except UserError as e:
            print_error(e.what, e.where, e.fix)
            return 2
    result["gain"] = result["pretrained_accuracy"] - result["random_init_accuracy"]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
