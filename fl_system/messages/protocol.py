"""What the server and client halves say to each other: record names and keys.

Every key every algorithm uses is defined here once; an algorithm's or add-on's own keys live
in its shared module (`fl_system/algorithms/<name>.py`, `fl_system/addons/<name>.py`), which
both of its halves import, so the two cannot drift apart.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

# Records inside a message's RecordDict.
ARRAYS = "arrays"  # ArrayRecord: model weights (down: global, up: local)
CONFIG = "config"  # ConfigRecord: per-message settings
METRICS = "metrics"  # MetricRecord: a reply's scalars

# ConfigRecord keys (server -> client).
RUN_CONFIG = "run-config"  # the resolved experiment config as JSON (run config + handshake)
SERVER_ROUND = "server-round"

# MetricRecord keys (client -> server).
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"  # handshake: the partitioning a node was started for
NUM_EXAMPLES = "num-examples"
TRAIN_LOSS = "train-loss"
NUM_STEPS = "num-steps"
COMPUTE_SECONDS = "compute-seconds"

# Per-client settings (server -> client): a ConfigRecord key TRAIN_OVERRIDE + name overrides
# the run's train.<name> for that message only (e.g. FedGSNR's "train.local_steps").
TRAIN_OVERRIDE = "train."
LOCAL_STEPS = f"{TRAIN_OVERRIDE}local_steps"  # a client's own step count (FedGSNR, stragglers)

# Queries the server asks within a round (ClientApp: @app.query(ASK_ACTION)); the config's
# QUESTION says which one, and the client hook whose `question` matches answers it.
ASK_ACTION = "ask"
ASK = f"query.{ASK_ACTION}"
QUESTION = "question"

# Secure aggregation (secagg=secaggplus): the weight a client scales its update by before
# masking (config, server -> client: the server fixes it at the protocol's setup), and the
# name of a sum the server learns only in total (config of a secure training message whose
# clients answer their term of it instead of training: FedDisco's label counts).
SECAGG_WEIGHT = "secagg-weight"
SECURE_SUM = "secure-sum"
# Reply records a strategy needs only in sum (SCAFFOLD's dc_k): their names (config, server
# -> client), summed unweighted beside the weighted update; their layer names (reply config
# record, client -> server: names, no values).
SECURE_RECORDS = "secure-records"
SECURE_LAYOUT = "secure-layout"

# Compression (compression.up, learning.compression): a reply's model update as one encoded
# blob; the tensors the codec does not cover (integer buffers) stay dense under ARRAYS.
UPDATE = "update"  # ArrayRecord holding one uint8 array, BLOB
BLOB = "blob"
# compression.down (server_app/downlink.py): the version of the global model a message
# carries (config), and the compressed broadcasts that reach it from the version the client
# holds (ArrayRecord, one uint8 blob per version, keyed by the version it makes).
MODEL_VERSION = "model-version"
DOWN_UPDATES = "down-updates"
# A reply the server could not read (a truncated or out-of-range update): REASON says why.
REJECTED = "rejected"

# Per-client evaluation (client_eval.enabled): EVAL_LOCAL (config, train message) asks the
# client to score its model after local training on its local test split; evaluate messages
# score the global model there. Either reply carries CLIENT_ACCURACY, CLIENT_LOSS and
# CLIENT_TEST_EXAMPLES (0: no test data; the server leaves it out).
EVAL_LOCAL = "eval-local"
CLIENT_ACCURACY = "client-accuracy"
CLIENT_LOSS = "client-loss"
CLIENT_TEST_EXAMPLES = "client-test-examples"
# Federated evaluation (evaluation=federated|both): an evaluate reply's ArrayRecord of counts
# (confusion, loss_sum, histograms: fl_system.learning.evaluation.counts_record), never records.
EVAL_COUNTS = "eval-counts"

# Message sent once per node before its first round: carries the config, returns identity.
HANDSHAKE_ACTION = "handshake"  # ClientApp: @app.query(HANDSHAKE_ACTION)
HANDSHAKE = f"query.{HANDSHAKE_ACTION}"
# What a ClientApp raises for any other message when it holds no handshake: its SuperNode
# restarted since (a node keeps its id across restarts under SuperNode authentication, not its
# ClientApp's context). The server handshakes a node whose error says this again.
NO_RUN_CONFIG = "message before the handshake: this node has no run config"
# A node holding its own data (dataset=images|table|hf|npz) adds to its handshake reply a
# ConfigRecord NODE_DATA: NODE_REPORT (fl_system.data.node_data.NodeReport as JSON: counts,
# classes, columns, no rows) and NODE_NAME (its node config `name`, else its partition id).
NODE_DATA = "node-data"
NODE_REPORT = "report"
NODE_NAME = "name"
# Every node adds a ConfigRecord NODE_MODEL: MODEL_FINGERPRINT (the model it builds for the
# run: class, layer names, shapes, dtypes; fl_system.learning.own_model.fingerprint), or MODEL_ERROR
# (why it cannot build it), and NODE_NAME; the server refuses a node whose model differs.
NODE_MODEL = "node-model"
MODEL_FINGERPRINT = "fingerprint"
MODEL_ERROR = "error"
# dataset.normalize=federated: before round 1 the server asks every node for the moments of
# its training records (ClientApp: @app.query(STATS_ACTION)); the reply's ArrayRecord
# STATS_RECORD holds count, sum and m2 per channel or numeric feature, nothing else.
STATS_ACTION = "stats"
STATS = f"query.{STATS_ACTION}"
STATS_RECORD = "stats"
# Sent to a node the server will not use (partition clash, partition out of range), with the
# reason under REASON; the ClientApp logs TURNED_AWAY_LOG + reason, which fl-client watches for.
TURN_AWAY_ACTION = "turn_away"
TURN_AWAY = f"query.{TURN_AWAY_ACTION}"
REASON = "reason"
TURNED_AWAY_LOG = "fl_system: turned away by the server:"


def rejected(content: RecordDict, reason: str) -> RecordDict:
    """A reply the server will not use: its metrics, and why (the strategy's screening,
    `server_app.federated.screening.unpack_replies`, counts it as a failure with that reason)."""
    out = RecordDict({REJECTED: ConfigRecord({REASON: reason})})
    if METRICS in content.metric_records:
        out[METRICS] = content.metric_records[METRICS]
    return out
