"""bertcli: pretrain BERT, RoBERTa and ALBERT encoders from raw text and fine-tune them on GLUE."""

__version__ = "0.1.0"
