"""What the server and client halves say to each other: record names and keys.

Every key that crosses the wire is defined here once, so the two halves of an algorithm
(`server_app/strategies/<name>.py` and `client_app/algorithms/<name>.py`) cannot drift apart.
"""

from __future__ import annotations

# Records inside a message's RecordDict.
ARRAYS = "arrays"  # ArrayRecord: model weights (down: global, up: local)
CONFIG = "config"  # ConfigRecord: per-message settings
METRICS = "metrics"  # MetricRecord: a reply's scalars

# ConfigRecord keys (server -> client).
RUN_CONFIG = "run-config"  # the resolved experiment config as JSON (run config + handshake)
SERVER_ROUND = "server-round"

# MetricRecord keys (client -> server).
PARTITION_ID = "partition-id"
NUM_EXAMPLES = "num-examples"
TRAIN_LOSS = "train-loss"
NUM_STEPS = "num-steps"
COMPUTE_SECONDS = "compute-seconds"

# SCAFFOLD: the server's control variate c (down), a client's change of c_i (up).
SCAFFOLD_C = "scaffold-c"
SCAFFOLD_DELTA_C = "scaffold-delta-c"

# FedDisco: a client's discrepancy d_k (up, every train reply), the target distribution T
# (down, only for target=global), and label counts (up, handshake, only for target=global).
DISCO_D = "disco-d"
DISCO_TARGET = "disco-target"
DISCO_COUNTS = "disco-counts"

# EFL: the sums U = sum u_k and V = sum u_k * w_k of last round's reporters (down), and a
# client's Fisher diagonal u_k and u_k * w_k at its end model (up), keyed by parameter name.
EFL_FISHER_SUM = "efl-U"
EFL_WEIGHTED_SUM = "efl-V"
EFL_FISHER = "efl-u"
EFL_WEIGHTED = "efl-v"
# With fisher_comm=topk only the largest entries travel; their packed positions (uint8) go
# under these keys beside the values (fl_system/fisher_records.py). EFL_FISHER_DUE (config,
# down): whether the client computes and sends u, v this round (fisher_every).
EFL_SUM_POSITIONS = "efl-UV-positions"
EFL_POSITIONS = "efl-uv-positions"
EFL_FISHER_DUE = "efl-fisher-due"
EFL_PENALTY = "efl-penalty"  # metric (up): the penalty at the client's end model, less Z
EFL_UP = (EFL_FISHER, EFL_WEIGHTED, EFL_POSITIONS)
EFL_DOWN = (EFL_FISHER_SUM, EFL_WEIGHTED_SUM, EFL_SUM_POSITIONS)

# TACO: the last global update u = w_{t-1} - w_t (down, ArrayRecord by layer name) and this
# client's tailored coefficient alpha_i (config, down), which sets its correction 1 - alpha_i.
TACO_LAST_UPDATE = "taco-u"
TACO_ALPHA = "taco-alpha"

# STEM: the momentum d (ArrayRecord by parameter name): the clients' average from the last
# round (down; absent in the first round) and a client's momentum at its end model (up).
STEM_MOMENTUM = "stem-d"

# Per-client settings (server -> client): a ConfigRecord key TRAIN_OVERRIDE + name overrides
# the run's train.<name> for that message only (e.g. FedGSNR's "train.local_steps").
TRAIN_OVERRIDE = "train."
LOCAL_STEPS = f"{TRAIN_OVERRIDE}local_steps"  # a client's own step count (FedGSNR, stragglers)

# Queries the server asks within a round (ClientApp: @app.query(ASK_ACTION)); the config's
# QUESTION says which one, and the client hook whose `question` matches answers it.
ASK_ACTION = "ask"
ASK = f"query.{ASK_ACTION}"
QUESTION = "question"

# FedGSNR: the question, and the reply's ArrayRecord of the mean gradient m_k and diagonal
# variance v_k at the received model, with the number of samples s in the metrics.
GSNR_STATS = "gsnr-stats"
GSNR_MEAN = "mean"
GSNR_VARIANCE = "variance"
GSNR_SAMPLES = "gsnr-samples"

# Compression (compression.up, fl_system.compression): a reply's model update as one encoded
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

# Message sent once per node before its first round: carries the config, returns identity.
HANDSHAKE_ACTION = "handshake"  # ClientApp: @app.query(HANDSHAKE_ACTION)
HANDSHAKE = f"query.{HANDSHAKE_ACTION}"
# Sent to a node the server will not use (partition clash, partition out of range), with the
# reason under REASON; the ClientApp logs TURNED_AWAY_LOG + reason, which fl-client watches for.
TURN_AWAY_ACTION = "turn_away"
TURN_AWAY = f"query.{TURN_AWAY_ACTION}"
REASON = "reason"
TURNED_AWAY_LOG = "fl_system: turned away by the server:"
