"""What a task is apart from training it: the layer fine-tuning, export and serving all read.

    heads.py            one HeadKind record per head (name, model head, outputs, featurizer,
                        --dev metric); export, predict and the fine-tuning tasks read this table
    featurizer.py       what a featurizer is: record -> model windows -> prediction
    classification.py   sentence (pair) classification / regression: its featurizer, `label_of`
    tagging/            BIO / BIOES schemes, word windows and their featurizer
    qa/                 SQuAD-layout records, question / context windows, n-best decoding
    embed.py            the `embed` head: encoder plus pooling as one module
    encoder_heads.py    the heads a pretrained checkpoint already has (fill-mask, features)

Below train and fine-tuning, above the model: a model is served exactly the windows it was
trained and scored on because both sides call these functions.
"""
