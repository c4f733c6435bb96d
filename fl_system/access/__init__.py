"""Who may do what on a federation: its operators and their roles (`operators`), the tokens
their keys sign (`tokens`), the Control API's checks on Flower's interfaces (`control_api`)
and the audit log of every call (`audit`)."""
