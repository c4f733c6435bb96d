"""An experiment's config: composed from `conf/` with Hydra, checked before any process
starts, and built into the experiment's parts."""
