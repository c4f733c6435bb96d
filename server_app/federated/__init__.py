"""What every fl_system strategy is built from: the Flower `Strategy` adaptor
(`strategy.FederatedStrategy`) and its parts, each with one job: the round's shape
(`round_rule`), reply screening (`screening`), weighting (`weighting`), what differential
privacy must know of a rule (`privacy_policy`), checkpointed state (`state`), and the
experiment a strategy is bound to (`experiment_binding`)."""
