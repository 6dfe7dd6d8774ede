# Makes configs/ importable as the package seq2seq.configs (see pyproject.toml), so Hydra can load it with pkg://.
