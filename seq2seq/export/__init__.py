"""`seq2seq-export`: a training checkpoint written as files for inference only. plan.py (ExportPlan: what
cli/export.py builds of the command line, checked), command.py (export(plan): the format's writer over
the checkpoint, the output written whole). The formats themselves are seq2seq.artifacts' (each writer
beside its reader)."""
