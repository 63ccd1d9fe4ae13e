"""The commands that run a trained model on the user's text, in one place (the layer above
fine-tuning and export, below the CLI):

    predict.py          `bertcli predict`: records -> jsonl through a checkpoint or an ONNX bundle
    features.py         `bertcli features`: hidden states of chosen layers -> .npy / parquet
    embed.py            `bertcli embed`: sentence embeddings of a file -> .npy / parquet
    evaluate_embed.py   `bertcli evaluate-embed`: retrieval (BEIR) and STS scores of an encoder
    fill_mask.py        `bertcli fill-mask`: the top-k fillers of each mask token
    evaluate.py         `bertcli evaluate`: MLM loss / perplexity of a checkpoint on corpora
"""
