"""What an add-on's server and client halves share: its message keys, math and settings.

An add-on composes with any algorithm that accepts it and is named once, from the key users
type down to its modules: `algorithm.<name>.*`, `conf/addon/<name>.yaml` (mounted under
`algorithm.<name>` for every algorithm by conf/config.yaml), `fl_system/addons/<name>.py`,
`server_app/addons/<name>.py` and `client_app/addons/<name>.py`.
"""
