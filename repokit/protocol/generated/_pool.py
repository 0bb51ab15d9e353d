"""repokit's own protobuf descriptor pool.

Every generated module in this package registers into ``POOL`` rather than protobuf's default
pool, so importing ``tritonclient.grpc`` (which defines the same ``inference.*`` messages in the
default pool) in the same process never clashes.
"""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
