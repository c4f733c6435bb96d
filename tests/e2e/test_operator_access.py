"""Who may do what, across "machines" (network namespaces): fl-server with TLS and SuperNode
authentication, two fl-clients that trust the apps of two operators only, and a host that
holds nothing but the public ca.crt."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_system.access.operators import key_id, parse_public_key
from fl_system.deploy import certs
from fl_system.records.results import read_rows
from tests.e2e.federation import BIN, Federation, started_federation, wait_for_text
from tests.e2e.netns import unavailable
from tests.e2e.operators import audit_lines, flwr_home, marker_app, said

WHY_NOT = unavailable()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]
NO_TOKEN = "Control API calls from its operators only, and none was sent"
HOSTS = ("client-a", "client-b")
POLICY = "site: site_b\nsecagg: secaggplus\nprivacy: {max_epsilon: 4}\n"


def trusting(fed: Federation, site: Site) -> list[str]:
    """What both nodes trust: the federation's admin and the operator sam."""
    return ["--trust", str(fed.certs / certs.ADMIN_PUB), "--trust", site.key("sam", "pub")]


@dataclass
class Site:
    """The federation, the outsider's folder (its ca.crt, its Flower home, its marker app),
    the operators' key folders, and the two nodes' logs."""

    federation: Federation
    work: Path
    ca: Path
    app: Path
    markers: Path
    env: dict[str, str]
    node_logs: list[Path]
    nodes: list[tuple[subprocess.Popen, Path]]

    def on(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        cmd = self.federation.lan[host].command([str(BIN / argv[0]), *argv[1:]])
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300)

    def key(self, name: str, suffix: str = "key") -> str:
        return str(self.work / name / f"{name}.{suffix}")

    @property
    def control(self) -> list[str]:
        """fl-server register|unregister|nodes from the outsider: its ca.crt, no credential."""
        return ["--control", self.federation.server, "--root-certificates", str(self.ca)]

    def remote(self, run_dir: str, *extra: str) -> list[str]:
        return [
            "fl-run", "runtime=remote", f"runtime.address={self.federation.server}",
            f"runtime.root_certificates={self.ca}", "dataset=digits", "model=mlp",
            "num_clients=2", "train.batch_size=64", f"hydra.run.dir={self.work / run_dir}",
            *extra,
        ]  # fmt: skip

    def refusals(self) -> int:
        return sum(log.read_text().count("fl-supernode: refused run") for log in self.node_logs)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("operators")
    with started_federation(work, ["client-a", "client-b", "outsider"], keys=2) as fed:
        (work / "ca").mkdir()
        ca = work / "ca" / certs.CA_CERT
        ca.write_bytes((fed.certs / certs.CA_CERT).read_bytes())
        markers = work / "markers"
        markers.mkdir()
        env = {**fed.env, "FLWR_HOME": str(flwr_home(work / "flwr", fed, ca))}
        s = Site(fed, work, ca, marker_app(work / "app", markers), markers, env, [], [])
        for name in ("vic", "sam", "ted"):  # made on their own machine (the outsider's)
            assert (
                s.on("outsider", "fl-certs", str(work / name), "--operator-key", name).returncode
                == 0
            )
        s.nodes = [fed.client(host, p, *trusting(fed, s)) for p, host in enumerate(HOSTS)]
        for _, log in s.nodes:
            assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
            assert "runs only apps signed by admin.pub, sam.pub" in log.read_text()
        s.node_logs = [log for _, log in s.nodes]
        yield s
        for proc, _ in s.nodes:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 143


def test_a_host_with_only_the_ca_certificate_is_refused_every_call(site: Site) -> None:
    fed = site.federation
    listed = fed.tool("server", "fl-server", "nodes", *fed.control).stdout
    start = len(audit_lines(fed))
    stranger_pub = str(fed.stranger / "supernode-0.pub")
    for argv in (
        ("flwr", "run", str(site.app), "fed"),
        tuple(site.remote("outsider-run")),
        ("flwr", "ls", "fed"),
        ("flwr", "log", "1", "fed"),
        ("flwr", "stop", "1", "fed"),
        ("fl-server", "register", stranger_pub, *site.control),
        ("fl-server", "unregister", str(fed.certs / "supernode-0.pub"), *site.control),
        ("fl-server", "nodes", *site.control),
    ):
        done = site.on("outsider", *argv)
        assert done.returncode != 0, argv
        assert NO_TOKEN in said(done), (argv, said(done))
        if argv[0].startswith("fl-"):  # ours: the refusal in one line
            assert sum("operators only" in line for line in done.stderr.splitlines()) == 1
    calls = [(e["who"], e["what"], e["result"][:50]) for e in audit_lines(fed)[start:]]
    refused = "refused: this SuperLink takes Control API calls fr"
    assert calls == [("-", call, refused) for call in ("start-run", "start-run", "list-runs",
        "stream-logs", "stop-run", "list-nodes", "list-nodes", "list-nodes")]  # fmt: skip
    assert fed.tool("server", "fl-server", "nodes", *fed.control).stdout == listed
    assert list(site.markers.iterdir()) == [] and site.refusals() == 0  # nothing reached a node


def test_operators_act_as_their_roles_allow_and_nodes_run_their_trusted_apps(site: Site) -> None:
    """A viewer may not submit, a submitter may not register nodes; a submitter the nodes
    trust trains to the end, one they do not trust is refused by every node; its marker app
    runs on both nodes once signed, and not changed by one byte after signing, nor signed by
    an untrusted key; a revoked operator is refused at its next call; the audit log holds
    each call once, with operator, role and result."""
    fed, state = site.federation, str(site.federation.work / "superlink-state")
    for name, role in (("vic", "viewer"), ("sam", "submitter"), ("ted", "submitter")):
        fed.tool("server", "fl-server", "operators", "add", site.key(name, "pub"),
                 "--role", role, "--state-dir", state)  # fmt: skip
    start = len(audit_lines(fed))
    done = site.on("outsider", *site.remote("vic-run", f"runtime.credential={site.key('vic')}"))
    assert done.returncode != 0
    assert "operator 'vic' (viewer) may not: submitting a run needs role admin or submitter" in (
        done.stderr
    )
    stranger = str(fed.stranger / "supernode-0.pub")
    done = site.on("outsider", "fl-server", "register", stranger, *site.control,
                   "--credential", site.key("sam"))  # fmt: skip
    needs = "(submitter) may not: registering and unregistering SuperNodes needs role admin"
    assert done.returncode != 0 and needs in said(done), said(done)
    sam = f"runtime.credential={site.key('sam')}"
    done = site.on("outsider", *site.remote("sam-run", sam, "num_rounds=2"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(read_rows(site.work / "sam-run" / "metrics.csv")) == 2
    ted = f"runtime.credential={site.key('ted')}"
    ted_kid = key_id(parse_public_key(Path(site.key("ted", "pub")).read_text(), "ted"))
    done = site.on("outsider", *site.remote("ted-run", ted, "num_rounds=1"))
    assert done.returncode != 0 and site.refusals() == 2
    line = next(x for x in done.stderr.splitlines() if x.startswith("fl-run: error: "))
    refusal = line.split("all 2 SuperNodes refused this run: ")[1]
    assert [part.split(": ", 1)[1] for part in refusal.split("; ")] == [
        f"the app is signed by key {ted_kid}, which this node does not trust"
    ] * 2, said(done)

    assert site.on("outsider", "fl-server", "login", site.key("sam"),
                   "--control", fed.server).returncode == 0  # fmt: skip
    code = site.app / "marker_app" / "apps.py"
    for signer, change in (("sam", b"# changed after signing\n"), ("vic", b""), ("sam", b"")):
        assert site.on("outsider", "fl-server", "sign", str(site.app),
                       "--credential", site.key(signer)).returncode == 0  # fmt: skip
        code.write_bytes(code.read_bytes() + change)
        before = site.refusals()
        assert site.on("outsider", "flwr", "run", str(site.app), "fed").returncode == 0
        deadline = time.monotonic() + 120
        while site.refusals() < before + 2 and len(list(site.markers.iterdir())) < 2:
            assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in site.node_logs]
            time.sleep(0.5)
        accepted = signer == "sam" and not change
        assert len(list(site.markers.iterdir())) == (2 if accepted else 0), (signer, change)
        if change:
            code.write_bytes(code.read_bytes().removesuffix(change))
    logs = "".join(log.read_text() for log in site.node_logs)
    assert logs.count("the app was changed after sam.pub signed it") == 2
    assert logs.count(", signed by sam.pub)") == 4  # sam's fl-run and its marker app, each node

    vic_nodes = ("fl-server", "nodes", *site.control, "--credential", site.key("vic"))
    assert site.on("outsider", *vic_nodes).returncode == 0
    fed.tool("server", "fl-server", "operators", "revoke", "vic", "--state-dir", state)
    done = site.on("outsider", *vic_nodes)
    assert done.returncode != 0 and "operator 'vic' was revoked" in said(done)
    calls = [(e["who"], e["role"], e["what"], e["result"][:7]) for e in audit_lines(fed)[start:]]
    assert calls == [
        ("vic", "viewer", "start-run", "refused"),  # fl-run's flwr run
        ("sam", "submitter", "list-nodes", "ok"),  # fl-server register looks first
        ("sam", "submitter", "register-node", "refused"),
        ("sam", "submitter", "start-run", "ok"),  # fl-run's flwr run --stream
        ("sam", "submitter", "stream-logs", "ok"),
        ("ted", "submitter", "start-run", "ok"),  # the nodes refuse it, not the server
        ("ted", "submitter", "stream-logs", "ok"),
        ("ted", "submitter", "list-runs", "ok"),  # fl-run asks what became of its failed run
        *[("sam", "submitter", "start-run", "ok")] * 3,  # the marker app, 3 times
        ("vic", "viewer", "list-nodes", "ok"),
        ("-", "-", "list-nodes", "refused"),  # vic, revoked
    ]
    signers = [e["signer"] for e in audit_lines(fed)[start:] if e["what"] == "start-run"]
    assert signers == [
        "",  # vic's, refused before the app was looked at
        "sam",
        "ted",
        "none: the app was changed after sam signed it",
        "vic",  # an operator, whom the nodes do not trust
        "sam",
    ]
    for path in ("operators.json", "audit.jsonl"):
        assert oct((Path(state) / path).stat().st_mode & 0o777) == "0o600"


def test_a_site_takes_part_only_in_runs_its_policy_allows(site: Site) -> None:
    """client-b restarts as site_b, whose policy requires SecAgg+ and DP with epsilon <= 4
    over the run: it refuses a clear run, which stops, as a round needs both nodes; it takes
    part in a SecAgg+ run under privacy=local at epsilon 2 and refuses one at epsilon 5."""
    fed = site.federation
    policy = site.work / "site_b.yaml"
    policy.write_text(POLICY)
    proc, _ = site.nodes[1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    site.nodes[1] = fed.client("client-b", 1, *trusting(fed, site), "--policy", str(policy))
    log = site.nodes[1][1]
    site.node_logs.append(log)
    assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
    assert "site site_b accepts secagg=secaggplus required; DP with epsilon <= 4 at delta" in (
        log.read_text()
    )
    sam = f"runtime.credential={site.key('sam')}"
    stops = "1 of 2 SuperNodes refused this run and a round needs 2 clients, 1 remain: node "
    loose = (
        "site_b: accepts at most epsilon <= 4 at delta <= 1e-05 over the run (this run's "
        "account: epsilon=5 at delta=1e-05, privacy=local, epsilon=5 per round over 1 round)"
    )
    private = ["secagg=secaggplus", "privacy=local", "num_rounds=1"]
    for name, extra, refusal in (
        ("clear-run", ["num_rounds=1"], "site_b: requires secagg=secaggplus (this run has "
                                        "secagg=none)"),
        ("private-run", [*private, "privacy.epsilon=2"], None),
        ("loose-run", [*private, "privacy.epsilon=5"], loose),
    ):  # fmt: skip
        done = site.on("outsider", *site.remote(name, sam, *extra))
        if refusal is None:  # site_b takes part: both partitions train
            assert done.returncode == 0, done.stderr[-2000:]
            rows = read_rows(site.work / name / "metrics.csv")
            assert len(rows) == 1 and float(rows[0]["participants"]) == 2, rows
            continue
        assert done.returncode != 0
        warned = [x for x in done.stderr.splitlines() if x.startswith("fl-run: warning: node ")]
        assert [x.split(" refused this run: ")[1] for x in warned] == [refusal], done.stderr
        line = next(x for x in done.stderr.splitlines() if x.startswith("fl-run: error: "))
        assert stops in line and line.endswith(refusal), line
        assert f": {refusal}" in log.read_text()  # the node's own line, with the app's hash
    said_there = log.read_text()
    assert said_there.count("fl-supernode: refused run ") == 2
    assert said_there.count("fl-supernode: accepted run ") == 1
