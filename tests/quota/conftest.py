"""The servers and clients of the broker, auth, AMQP and proxy suites."""

from tests.amqp.conftest import make_local_gateway  # noqa: F401  (fixture)
from tests.auth.conftest import make_secure  # noqa: F401  (fixture)
from tests.broker.conftest import make_cluster  # noqa: F401  (fixture)
from tests.compat.conftest import cluster, rocketmq_v4_python, v4  # noqa: F401  (fixtures)
from tests.proxy.conftest import client, client_python, proxied  # noqa: F401  (fixtures)
from tests.proxy.test_auth import secured  # noqa: F401  (fixture)
