"""Interactive queries (KIP-535), one job per module:

- ``router``: key metadata, local lags, and the routing of a query to the copy that answers
  it, or of a range to every partition's (``InteractiveQueries``);
- ``local``: a read served by this instance's own copy (active, standby or restoring);
- ``reads``: what each query reads from a store partition (a key, a key range, windows);
- ``endpoints``: one HTTP request mapped to the router, and its answer;
- ``server``: the HTTP(S) query server of one instance;
- ``client``: forwarding a query to the instance that holds the key;
- ``results``: what a query answers and the errors it raises (re-exported here, public);
- ``security``: who may ask (bearer tokens, the bind-host rule, TLS).

Membership records are signed in :mod:`streams_runtime.cluster.membership_auth`.
"""

from streams_runtime.queries.results import (
    InvalidKeyError,
    KeyQueryMetadata,
    NoReplicaWithinBoundError,
    NotAvailableError,
    PartitionResult,
    QueryError,
    QueryResult,
    RangeResult,
    UnknownStoreError,
    UnsupportedQueryError,
)

__all__ = [
    "InvalidKeyError",
    "KeyQueryMetadata",
    "NoReplicaWithinBoundError",
    "NotAvailableError",
    "PartitionResult",
    "QueryError",
    "QueryResult",
    "RangeResult",
    "UnknownStoreError",
    "UnsupportedQueryError",
]
