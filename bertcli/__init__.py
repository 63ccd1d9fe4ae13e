"""bertcli: pretrain BERT, RoBERTa, ALBERT and ModernBERT encoders from raw text, fine-tune them
(GLUE, your own files, NER, SQuAD), extract features, export them to ONNX and serve predictions.

From Python (the functions the commands call; see bertcli/api.py for their signatures):

    from bertcli import pretrain, finetune
    run = pretrain("bert-tiny", overrides={"train.max_steps": 200})
    finetune("glue", run.checkpoint, tasks="sst2", data_dir="glue_data")

`import bertcli` imports no torch: the functions are loaded on first use.
"""

import importlib
import types
from typing import Any

from bertcli.core.version import __version__

__all__ = ["__version__", "build_data", "export", "features", "fill_mask", "finetune", "finetune_classify",
           "finetune_glue", "finetune_ner", "finetune_squad", "load", "predict", "pretrain", "tokenize"]
_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str):
    # PEP 562: the first `bertcli.pretrain` imports bertcli.api (which itself imports torch
    # only inside its functions).
    if name in _API:
        from bertcli import api

        return getattr(api, name)
    raise AttributeError(f"module 'bertcli' has no attribute {name!r}")


class _CallablePackage(types.ModuleType):
    """`bertcli.finetune` and `bertcli.export` are also subpackages, and importing a submodule
    sets the parent's attribute to the module (bertcli.finetune.engine makes `bertcli.finetune`
    the package), so a plain function of that name would be replaced. The packages themselves
    are made callable instead: `bertcli.finetune(...)` is `bertcli.api.finetune(...)` and
    `bertcli.finetune.engine` still resolves."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:   # api.finetune's or api.export's own
        from bertcli import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


# Both packages' __init__ modules hold only a docstring (the no-torch test guards that).
# (import_module, not `from bertcli import export`: that would find the function through
# __getattr__ above.)
for _name in ("export", "finetune"):
    importlib.import_module(f"bertcli.{_name}").__class__ = _CallablePackage
del _name
