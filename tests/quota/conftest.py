"""The clusters of the broker and auth suites: plain, and with authentication on."""

from tests.amqp.conftest import make_local_gateway  # noqa: F401  (fixture)
from tests.auth.conftest import make_secure  # noqa: F401  (fixture)
from tests.broker.conftest import make_cluster  # noqa: F401  (fixture)
