"""What a run leaves on disk, and the formats models travel in; no decoding.

run_dir.py (every path of a run directory, no torch), path_kind.py (what a path names, no torch),
freshness.py (whether an export was made from a checkpoint as it is now, no torch), checkpoint.py
(the checkpoint payload as a type, its upgrade from older payloads, crash-safe save, weights-only load,
the model rebuilt from a checkpoint).
"""
