"""seq2seq-distill: sequence-level knowledge distillation (Kim & Rush, 2016) in one command.

A teacher translates the training corpus (translations.py, restartable and cached), a hypothesis is
kept per line and bad lines dropped (selection.py), a student trains on the result with validation and
test on the original references (student.py, through `seq2seq.train.command.train`), and the two are
compared (report.py). command.py chains them in an output folder of its own (output.py); corpus.py makes
the student's corpus of the teacher's translations."""
