"""Commands for federations across machines: fl-certs, fl-server, fl-client."""
