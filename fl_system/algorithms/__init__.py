"""What an algorithm's server and client halves share: its message keys and its math.

One module per algorithm, named as in `conf/algorithm/<name>.yaml`, and only for algorithms
whose halves share something: the server half is `server_app/strategies/<name>.py` (server-only
math beside it in `<name>_math.py`), the client half `client_app/algorithms/<name>.py`.
"""
