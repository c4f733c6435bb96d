"""What happens to the clients' saved state (fl_system.runtime.state_root) when a run ends here.

Stateful algorithms (SCAFFOLD's c_i, FedDyn's h_i, MOON's previous model, compression
residuals) save each client's state under `<state root>/<run id>/partition-<p>`. With
runtime=simulation and runtime=local every client runs here, so fl-run knows when they are
done with it: a run that completes (all rounds, or the target reached) removes its run's
folder; a run that fails or is interrupted keeps it, because `resume=true` continues from it.
`keep_client_state=true` keeps it in every case (extending a completed run with resume and a
larger num_rounds needs it). Clients on other machines (`fl-client`) keep theirs: the state
directory there holds one folder per run id.
"""

from __future__ import annotations

import shutil

from omegaconf import DictConfig, OmegaConf

from fl_system.runtime.state_root import default_state_root


def discard_finished(cfg: DictConfig) -> None:
    """Remove the state of a completed run's clients, unless `keep_client_state`."""
    if OmegaConf.select(cfg, "keep_client_state", default=False) or not cfg.run_id:
        return
    shutil.rmtree(default_state_root() / str(cfg.run_id), ignore_errors=True)
