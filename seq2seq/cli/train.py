"""`seq2seq-train`: Hydra composes the config, `seq2seq.train.run.train` does the work."""

from __future__ import annotations

from seq2seq.allocator import relaunch_with_tcmalloc

relaunch_with_tcmalloc("seq2seq-train", __name__)  # before torch is imported: see seq2seq/allocator.py

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from seq2seq.cli.common import CONFIG_PATH, report_errors
from seq2seq.config import register_configs
from seq2seq.train.run import train

register_configs()
# A resumed run keeps writing into its own directory (see hydra.run.dir in configs/train.yaml).
OmegaConf.register_new_resolver("seq2seq.run_dir", lambda resume, fresh: resume or fresh, replace=True)
OmegaConf.register_new_resolver(
    "seq2seq.hydra_subdir", lambda resume, stamp: f".hydra/resumed-{stamp}" if resume else ".hydra", replace=True
)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def main(cfg: DictConfig) -> None:
    runtime = HydraConfig.get()
    report_errors(lambda: train(cfg, runtime.runtime.output_dir, list(runtime.overrides.task)), cfg.debug)


if __name__ == "__main__":
    main()
