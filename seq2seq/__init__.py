"""seq2seq: encoder-decoder Transformers for sequence-to-sequence tasks, trained and decoded from Hydra configs.

Importing the package does nothing to the process: a command prepares it (seq2seq/startup.py) once its
config is checked, before torch or ctranslate2 load."""
