"""The processes of a run on this machine: how fl-run starts them (`launch`), our SuperNode
and SuperLink, and where their state lives."""
