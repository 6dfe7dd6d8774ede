"""What a run leaves on disk, and the formats models travel in; no decoding.

run_dir.py (every path of a run directory, no torch), path_kind.py (what a path names, no torch),
freshness.py (whether an export was made from a checkpoint as it is now, no torch), checkpoint.py
(the checkpoint payload as a type, its upgrade from older payloads, crash-safe save, the model rebuilt
from a checkpoint), model_files.py (a checkpoint or weights export read for decoding, with its
tokenizers), the formats: safetensors.py (the weights export), ctranslate2_model.py, marian.py (Hugging
Face Marian), argos.py (Argos Translate), and exports.py (an export's directory written whole, and a
run's own exports; seq2seq-export's work over the formats is seq2seq/export/command.py's).
"""
