"""Tokenizer stage: train WordPiece (default), byte-level BPE or Unigram with `tokenizers` and
write a Hugging Face-compatible directory.

CONTRACT (used by the data builder, trainer, fill-mask and fine-tuning):

    run_tokenize(recipe, force=False) -> StageResult      # `bertcli tokenize`
    ensure_tokenizer(recipe) -> StageResult              # reuse when complete, else build
    load_tokenizer(path) -> TokenizerInfo                # any HF tokenizer dir with tokenizer.json

    TokenizerInfo fields: path, tokenizer (tokenizers.Tokenizer, with its post-processor),
    kind ("wordpiece" | "bpe" | "unigram"), vocab_size (len incl. special tokens),
    pad_id, unk_id, cls_id, sep_id, mask_id (for roberta: cls = <s>, sep = </s>),
    special_ids (frozenset of all special-token ids).

Special-token sets and their ids (first ids of the vocabulary, in this order):
    bert:    [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
    roberta: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4        (pad id 1: RoBERTa's padding_idx)
    albert:  <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4
"""
