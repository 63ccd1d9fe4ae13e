"""`bertcli distill`: a smaller, faster student taught by a fine-tuned teacher (student.py,
losses.py, teacher.py: the fine-tuning engine's teacher hook; run.py: the command)."""
