"""What fl-client hands its SuperNode about its site, by environment variable: named apart
from the checks themselves, so that a node without them imports none of their code (a
SuperNode's start-up is paid by every node of every run)."""

TRUST_ENV = "FL_NODE_TRUST"  # operator public keys (.pub files), os.pathsep between them
POLICY_ENV = "FL_NODE_POLICY"  # the site's policy file (fl-client --policy)
SITE_ENV = "FL_NODE_SITE"  # the site's name in its refusals
