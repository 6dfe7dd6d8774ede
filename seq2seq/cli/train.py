"""`seq2seq-train`: Hydra composes the config, `seq2seq.train.run.train` does the work."""

from __future__ import annotations

from seq2seq.allocator import relaunch_with_tcmalloc

relaunch_with_tcmalloc("seq2seq-train", __name__)  # before torch is imported: see seq2seq/allocator.py

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from seq2seq.cli.common import CONFIG_PATH, check_override_keys, report_errors
from seq2seq.config import TrainConfig, register_configs
from seq2seq.train.run import GROUPS, train

register_configs()
# A resumed run keeps writing into its own directory (see hydra.run.dir in configs/train.yaml).
OmegaConf.register_new_resolver("seq2seq.run_dir", lambda resume, fresh: resume or fresh, replace=True)
OmegaConf.register_new_resolver(
    "seq2seq.hydra_subdir", lambda resume, stamp: f".hydra/resumed-{stamp}" if resume else ".hydra", replace=True
)


def main() -> None:
    # Before Hydra: it would add a `+key` and run without reading it, or answer a typo in six lines.
    report_errors(lambda: check_override_keys(sys.argv[1:], TrainConfig, GROUPS), "debug=true" in sys.argv)
    _hydra_main()


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    runtime = HydraConfig.get()
    report_errors(lambda: train(cfg, runtime.runtime.output_dir, list(runtime.overrides.task)), cfg.debug)


if __name__ == "__main__":
    main()
