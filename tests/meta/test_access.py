"""RabbitMQ's password hashes and permission regexes."""

from ferrymq.meta.access import hash_password, permits, verify_password

# guest/guest as `rabbitmqctl export_definitions` of RabbitMQ 3.10.8 shows it
GUEST_HASH = "xJTKmCHUZDU3Rw1VQVyaXLTBR4c/spmgKmjT1MmBcipqgwiE"


def test_a_rabbitmq_hash_verifies_its_password_only():
    assert verify_password("guest", GUEST_HASH)
    assert not verify_password("guest2", GUEST_HASH)
    assert not verify_password("", GUEST_HASH)


def test_our_hashes_are_salted_and_verify():
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first != second
    assert verify_password("s3cret", first) and verify_password("s3cret", second)
    for algorithm in ("rabbit_password_hashing_sha512", "rabbit_password_hashing_md5"):
        assert verify_password("x", hash_password("x", algorithm), algorithm)
        assert not verify_password("y", hash_password("x", algorithm), algorithm)


def test_empty_or_broken_hashes_match_nothing():
    assert not verify_password("", "")
    assert not verify_password("guest", "not base64!")
    assert not verify_password("guest", GUEST_HASH, "rabbit_password_hashing_unknown")


def test_permission_regexes_search_and_empty_grants_nothing():
    assert permits(".*", "anything")
    assert permits("^orders", "orders.eu") and not permits("^orders", "eu.orders")
    assert permits("eu", "orders.eu")
    assert not permits("", "") and not permits("", "q")
