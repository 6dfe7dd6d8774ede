"""What a run leaves on disk, and the formats models travel in: checkpoints and the run directory,
the weights export (safetensors.py), CTranslate2 (ctranslate2.py), Hugging Face Marian (marian.py),
Argos Translate (argos.py), and seq2seq-export's work over them (export.py). No decoding here."""
