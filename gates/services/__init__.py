"""Write paths of the gates app, one module per part of the domain.

Each public function owns its transaction and writes its ledger entry inside it; views, the API,
tasks and commands call these and never save models themselves.
"""
