"""`python -m bertcli` (and `torchrun ... -m bertcli pretrain ...`)."""

from bertcli.cli import main

main()
